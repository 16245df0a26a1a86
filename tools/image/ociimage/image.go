// Package ociimage is podwire's one OCI image writer: the agent's
// multi-arch image (tools/image) and the test suites' images (pause,
// flannel, kube-proxy, agnhost) are built, archived and pushed with it, on
// top of github.com/google/go-containerregistry, with no daemon and no
// base image.
//
// Images are reproducible: every timestamp is Epoch and every entry is
// owned by root, so the same files give the same digests. Limits: one
// layer per image, regular files, directories and symlinks only; the
// image's root has no /tmp, /etc or /dev of its own (the container runtime
// mounts what a container needs).
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is every timestamp of an image: its files' mtimes and its config's
// creation time.
var Epoch = time.Unix(0, 0).UTC()

// File is one entry of an image's layer: a regular file, or a symlink
// when Link is set.
type File struct {
	// Path is where the entry is in the image ("opt/bin/flanneld"); a
	// leading slash is dropped. Parent directories are added (mode 0755).
	Path string
	// Mode is the permission bits of a regular file (0o755, 0o644).
	Mode int64
	// Data is a regular file's content.
	Data []byte
	// Link, when set, makes the entry a symlink to Link (absolute, or
	// relative to the link's directory); Mode and Data are ignored.
	Link string
}

// Symlink is a File that is a symlink at path to target.
func Symlink(path, target string) File {
	return File{Path: path, Link: target}
}

// Config is what an image runs. OS and Architecture default to linux and
// the running architecture (runtime.GOARCH).
type Config struct {
	Entrypoint       []string
	Env              []string // "KEY=value"
	OS, Architecture string
}

// Image is a one-layer OCI image (OCI manifest, config and layer media
// types) holding files, with cfg. When two files have the same path, the
// first one is kept, so callers can merge lists (two programs' shared
// libraries) without deduplicating.
func Image(files []File, cfg Config) (v1.Image, error) {
	layerTar, err := Layer(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = cfg.OS, cfg.Architecture
	if cf.OS == "" {
		cf.OS = "linux"
	}
	if cf.Architecture == "" {
		cf.Architecture = runtime.GOARCH
	}
	cf.Config.Entrypoint = cfg.Entrypoint
	cf.Config.Env = cfg.Env
	cf.Created = v1.Time{Time: Epoch}
	return mutate.ConfigFile(img, cf)
}

// Layer is the uncompressed tar of files: the parent directories first
// (parents before children, sorted), then the files in the order given,
// each once (the first of a path wins), at Epoch, owned by root. It fails
// on an empty path or one that leaves the root ("../x").
func Layer(files []File) ([]byte, error) {
	dirs := map[string]bool{}
	seen := map[string]bool{}
	var entries []File
	for _, f := range files {
		p := path.Clean(strings.TrimPrefix(f.Path, "/"))
		if p == "." || p == ".." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("bad image path %q", f.Path)
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		f.Path = p
		entries = append(entries, f)
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		if !seen[d] {
			dirList = append(dirList, d)
		}
	}
	slices.SortFunc(dirList, func(a, b string) int {
		if c := strings.Count(a, "/") - strings.Count(b, "/"); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: Epoch}); err != nil {
			return nil, err
		}
	}
	for _, f := range entries {
		hdr := &tar.Header{Name: f.Path, ModTime: Epoch}
		if f.Link != "" {
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
		} else {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, f.Mode, int64(len(f.Data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("failed to add %s to the layer: %w", f.Path, err)
		}
		if f.Link == "" {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Index is an OCI image index of images, each described with its config's
// platform, and annotations on the index (org.opencontainers.image.version
// and the like; nil for none).
func Index(images []v1.Image, annotations map[string]string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture}},
		})
	}
	if len(annotations) > 0 {
		idx = mutate.Annotations(idx, annotations).(v1.ImageIndex)
	}
	return idx, nil
}
