package multinode

import (
	"context"
	"fmt"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

// addonImages are the add-ons' images in the run's registry, pinned by
// digest.
type addonImages struct {
	kubeProxy, flannel, agnhost string
}

// pushAddonImages builds the images of kube-proxy and agnhost (from the
// Kubernetes binaries) and of flannel (from scripts/flannel-build.sh's)
// and pushes them to the run's registry.
func pushAddonImages(ctx context.Context, k8sBin, flannelDir string) (*addonImages, error) {
	start := time.Now()
	var out addonImages
	for _, im := range []struct {
		repoTag string
		build   func() (v1.Image, error)
		ref     *string
	}{
		{"kubernetes/kube-proxy:v1.37.2", func() (v1.Image, error) { return cluster.KubeProxyImage(k8sBin) }, &out.kubeProxy},
		{"flannel/flannel:v0.28.10", func() (v1.Image, error) { return cluster.FlannelImage(flannelDir) }, &out.flannel},
		{"e2e-test-images/agnhost:2.59", func() (v1.Image, error) { return cluster.AgnhostImage(k8sBin) }, &out.agnhost},
	} {
		img, err := im.build()
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", im.repoTag, err)
		}
		if *im.ref, err = c.Push(ctx, img, im.repoTag); err != nil {
			return nil, err
		}
		fmt.Printf("registry: pushed %s\n", *im.ref)
	}
	fmt.Printf("registry: add-on images built and pushed in %.1fs\n", time.Since(start).Seconds())
	return &out, nil
}
