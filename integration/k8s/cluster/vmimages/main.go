// Command pausearchive writes the cluster's pause image (cluster.PauseImage)
// as an OCI archive into the directory its argument names, and prints the
// archive's path: the VM suite has no Go toolchain to build it at Start
// (cluster.Options.PauseArchive).
package main

import (
	"fmt"
	"os"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pausearchive DIR")
		os.Exit(2)
	}
	path, err := cluster.BuildPauseArchive(os.Args[1], cluster.PauseImage)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pausearchive:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
