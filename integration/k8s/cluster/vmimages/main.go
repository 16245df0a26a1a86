// Command vmimages writes the images of the VM's cluster suite as OCI
// archives into the directory its first argument names: the cluster's
// pause image (pause.oci.tar, cluster.PauseImage;
// cluster.Options.PauseArchive), the VRRP speaker's (vrrp.oci.tar,
// cluster.VRRPImageRef) and Multus thick's from the build in the directory
// its second argument names (multus.oci.tar, cluster.MultusImageRef). The
// VM has neither the Go toolchain that builds the first nor the host's
// keepalived that makes the second, and compressing Multus's layers under
// TCG would cost the run a minute that the host spends in seconds.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/tools/image/ociimage"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: vmimages DIR MULTUS_DIR")
		os.Exit(2)
	}
	if err := write(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "vmimages:", err)
		os.Exit(1)
	}
}

func write(dir, multusDir string) error {
	if _, err := cluster.BuildPauseArchive(dir, cluster.PauseImage); err != nil {
		return err
	}
	img, err := cluster.VRRPImage()
	if err != nil {
		return err
	}
	if err := ociimage.WriteArchive(filepath.Join(dir, "vrrp.oci.tar"), cluster.VRRPImageRef, img); err != nil {
		return err
	}
	if img, err = cluster.MultusImage(multusDir); err != nil {
		return err
	}
	return ociimage.WriteArchive(filepath.Join(dir, "multus.oci.tar"), cluster.MultusImageRef, img)
}
