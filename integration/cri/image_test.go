package cri

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// agentImage is the name scripts/image.sh records in the archive.
const agentImage = "docker.io/podwire/podwire-agent:dev"

// TestAgentImageImports: the OCI archive of `make image` imports into a real
// containerd with `ctr -n k8s.io images import`, and the CRI (what the
// kubelet asks) then knows the image, with the entrypoint we built.
func TestAgentImageImports(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs containerd")
	}
	archive := os.Getenv("PODWIRE_IMAGE")
	if archive == "" {
		t.Skip("PODWIRE_IMAGE not set: run through make test-e2e")
	}
	n := startNode(t)
	out, err := exec.Command("ctr", "-a", n.sock, "-n", "k8s.io", "images", "import",
		"--snapshotter", "overlayfs", archive).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images import %s: %v\n%s", archive, err, out)
	}
	t.Logf("ctr images import: %s", out)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := n.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: agentImage}, Verbose: true})
	if err != nil || st.Image == nil {
		t.Fatalf("CRI does not see %s after the import: %v", agentImage, err)
	}
	if st.Image.GetSize() == 0 {
		t.Errorf("image %s has size 0", agentImage)
	}
	t.Logf("CRI image %s: id %s, %d bytes", agentImage, st.Image.GetId(), st.Image.GetSize())
}
