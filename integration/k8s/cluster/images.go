package cluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"
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

// ImageFile is one regular file of an image layer.
type ImageFile struct {
	Path string // inside the image, without a leading slash
	Mode int64
	Data []byte
}

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
	src := filepath.Join(dir, "pause-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module pause\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(pauseSource), 0o644); err != nil {
		return "", err
	}
	bin, err := GoBinary(src)
	if err != nil {
		return "", err
	}
	archive := filepath.Join(dir, "pause.oci.tar")
	return archive, WriteImageArchive(archive, ref, []ImageFile{{Path: "pause", Mode: 0o755, Data: bin}}, []string{"/pause"})
}

// WriteImageArchive writes an OCI image layout tarball (for `ctr images
// import`, see Cluster.ImportImage) of a one-layer image named ref holding
// files, with entrypoint as its Entrypoint.
func WriteImageArchive(path, ref string, files []ImageFile, entrypoint []string) error {
	epoch := time.Unix(0, 0)
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	for _, f := range files {
		if err := lw.WriteHeader(&tar.Header{Name: f.Path, Mode: f.Mode, Size: int64(len(f.Data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := lw.Write(f.Data); err != nil {
			return err
		}
	}
	if err := lw.Close(); err != nil {
		return err
	}

	blobs := map[string][]byte{}
	type descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
		Platform    map[string]string `json:"platform,omitempty"`
	}
	add := func(mediaType string, data []byte) descriptor {
		sum := sha256.Sum256(data)
		blobs[hex.EncodeToString(sum[:])] = data
		return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(data)}
	}
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return b
	}
	layerDesc := add("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config := add("application/vnd.oci.image.config.v1+json", mustJSON(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": entrypoint},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	}))
	manifest := add("application/vnd.oci.image.manifest.v1+json", mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        config,
		"layers":        []descriptor{layerDesc},
	}))
	manifest.Annotations = map[string]string{"io.containerd.image.name": ref}
	manifest.Platform = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	index := mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []descriptor{manifest},
	})

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	write := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := write("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := write("index.json", index); err != nil {
		return err
	}
	for hexDigest, data := range blobs {
		if err := write("blobs/sha256/"+hexDigest, data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
