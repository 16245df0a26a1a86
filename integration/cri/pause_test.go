package cri

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

// pauseImage is the sandbox image the test builds and imports: no registry
// is reachable, and the CRI plugin pulls sandbox_image only when it is not
// already in the k8s.io namespace.
const pauseImage = "docker.io/podwire/pause:e2e"

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

// buildPauseArchive compiles the pause binary statically and writes an OCI
// image layout tarball holding it, for `ctr images import`.
func buildPauseArchive(dir string) (string, error) {
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
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(dir, "pause")
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("failed to build the pause binary: %v\n%s", err, out)
	}
	pause, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}

	// The layer: one static binary at /pause.
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	epoch := time.Unix(0, 0)
	if err := lw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(pause)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if _, err := lw.Write(pause); err != nil {
		return "", err
	}
	if err := lw.Close(); err != nil {
		return "", err
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
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[hex.EncodeToString(sum[:])] = data
		return descriptor{MediaType: mediaType, Digest: d, Size: len(data)}
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
		"config":       map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	}))
	manifest := add("application/vnd.oci.image.manifest.v1+json", mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        config,
		"layers":        []descriptor{layerDesc},
	}))
	manifest.Annotations = map[string]string{
		"io.containerd.image.name":          pauseImage,
		"org.opencontainers.image.ref.name": "e2e",
	}
	manifest.Platform = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	index := mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []descriptor{manifest},
	})

	archive := filepath.Join(dir, "pause.oci.tar")
	f, err := os.Create(archive)
	if err != nil {
		return "", err
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
		return "", err
	}
	if err := write("index.json", index); err != nil {
		return "", err
	}
	for hexDigest, data := range blobs {
		if err := write("blobs/sha256/"+hexDigest, data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return archive, f.Close()
}
