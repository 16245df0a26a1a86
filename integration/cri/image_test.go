package cri

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestAgentImageImports: the OCI archive of `make image` (a multi-arch
// image index) imports into a real containerd with
// `ctr -n k8s.io images import`, and the CRI (what the kubelet asks) then
// knows the image by the name scripts/image.sh recorded (PODWIRE_IMAGE_REF,
// REGISTRY/podwire-agent:VERSION), unpacked for this node's platform.
func TestAgentImageImports(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs containerd")
	}
	archive, agentImage := os.Getenv("PODWIRE_IMAGE"), os.Getenv("PODWIRE_IMAGE_REF")
	if archive == "" || agentImage == "" {
		t.Skip("PODWIRE_IMAGE or PODWIRE_IMAGE_REF not set: run through make test-e2e")
	}
	n := startNode(t)
	out, err := n.ctr("images", "import", "--snapshotter", "overlayfs", archive)
	if err != nil {
		t.Fatalf("ctr images import %s: %v\n%s", archive, err, out)
	}
	t.Logf("ctr images import: %s", out)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// containerd 2.x's CRI learns of an image that ctr imported from the
	// image-create event, which its event monitor handles after the
	// import has returned: ask until it knows it, or ctx ends.
	var st *runtimeapi.ImageStatusResponse
	for {
		st, err = n.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: agentImage}, Verbose: true})
		if err == nil && st.Image != nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("CRI does not see %s within 30 s of the import: %v", agentImage, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if st.Image.GetSize() == 0 {
		t.Errorf("image %s has size 0", agentImage)
	}
	// The verbose info is the image config of the platform unpacked.
	info := st.GetInfo()["info"]
	for _, want := range []string{`"architecture":"` + runtime.GOARCH + `"`, `"/podwire-agent"`} {
		if !strings.Contains(info, want) {
			t.Errorf("CRI image info lacks %s: %s", want, info)
		}
	}
	t.Logf("CRI image %s: id %s, %d bytes", agentImage, st.Image.GetId(), st.Image.GetSize())
}
