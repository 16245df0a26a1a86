package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podwire/podwire/tools/image/ociimage"
)

// PauseImage is the sandbox image of the cluster, built by Start and
// imported into containerd: no registry is reachable, and the CRI plugin
// pulls sandbox_image only when it is not already in the k8s.io namespace.
// Pods of the tests use it for their containers too (imagePullPolicy:
// Never): a container whose process only sleeps, in the pod's netns.
const PauseImage = "docker.io/podwire/pause:k8s"

// pauseSource is the sandbox's init process: it holds the namespaces, reaps
// orphans, and exits on SIGINT/SIGTERM like registry.k8s.io/pause.
const pauseSource = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
`

// ImageFile is one entry of an image (tools/image/ociimage.File): a regular
// file, or a symlink.
type ImageFile = ociimage.File

// GoBinary compiles the main package in srcDir statically for the running
// architecture (CGO_ENABLED=0, -trimpath) and returns the binary's bytes.
func GoBinary(srcDir string) ([]byte, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(srcDir, "a.out")
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
	cmd.Dir = srcDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("failed to build %s: %v\n%s", srcDir, err, b)
	}
	defer os.Remove(out)
	return os.ReadFile(out)
}

// BuildPauseArchive compiles the pause binary and writes, in dir, the OCI
// archive of an image named ref holding it (Start uses PauseImage; the CRI
// suite, integration/cri, its own name), for `ctr images import`.
func BuildPauseArchive(dir, ref string) (string, error) {
	img, err := BuildPauseImage(dir)
	if err != nil {
		return "", err
	}
	archive := filepath.Join(dir, "pause.oci.tar")
	return archive, ociimage.WriteArchive(archive, ref, img)
}

// BuildPauseImage compiles the pause binary (in dir) and returns the
// one-layer image holding it as /pause, its entrypoint: for an archive
// (BuildPauseArchive) or a registry (CRI-O's nodes pull it from the run's).
func BuildPauseImage(dir string) (v1.Image, error) {
	src := filepath.Join(dir, "pause-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module pause\n\ngo 1.22\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(pauseSource), 0o644); err != nil {
		return nil, err
	}
	bin, err := GoBinary(src)
	if err != nil {
		return nil, err
	}
	return ociimage.Image([]ImageFile{{Path: "pause", Mode: 0o755, Data: bin}}, ociimage.Config{Entrypoint: []string{"/pause"}})
}

// WriteImageArchive writes an OCI archive (for `ctr images import`, see
// Node.ImportImage) of a one-layer image for the host's architecture named
// ref, holding files, with entrypoint as its Entrypoint.
func WriteImageArchive(path, ref string, files []ImageFile, entrypoint []string) error {
	img, err := ociimage.Image(files, ociimage.Config{Entrypoint: entrypoint})
	if err != nil {
		return err
	}
	return ociimage.WriteArchive(path, ref, img)
}
