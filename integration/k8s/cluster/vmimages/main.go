// Command vmimages writes the images of the VM's cluster suite as OCI
// archives into the directory its argument names: the cluster's pause image
// (pause.oci.tar, cluster.PauseImage; cluster.Options.PauseArchive) and the
// VRRP speaker's (vrrp.oci.tar, cluster.VRRPImageRef). The VM has neither
// the Go toolchain that builds the first nor the host's keepalived that
// makes the second.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/tools/image/ociimage"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: vmimages DIR")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "vmimages:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	if _, err := cluster.BuildPauseArchive(dir, cluster.PauseImage); err != nil {
		return err
	}
	img, err := cluster.VRRPImage()
	if err != nil {
		return err
	}
	return ociimage.WriteArchive(filepath.Join(dir, "vrrp.oci.tar"), cluster.VRRPImageRef, img)
}
