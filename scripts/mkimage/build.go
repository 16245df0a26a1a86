package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildOptions are build's flags: the binaries bins, taken from each
// platform's directory, go into that platform's image.
type buildOptions struct {
	out, name, entrypoint string
	version, revision     string
	platforms             platformFlags
	bins                  []string
}

// epoch is every timestamp in the image: the same binaries give the same
// digests.
var epoch = time.Unix(0, 0).UTC()

// build writes the archive and returns the index's digest.
func build(o buildOptions) (v1.Hash, error) {
	if len(o.platforms) == 0 || len(o.bins) == 0 {
		return v1.Hash{}, fmt.Errorf("build: need at least one -platform and one binary")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.platforms {
		img, err := platformImage(p, o.bins, o.entrypoint)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("image for %s/%s: %w", p.os, p.arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.os, Architecture: p.arch}},
		})
	}
	ann := map[string]string{}
	if o.version != "" {
		ann["org.opencontainers.image.version"] = o.version
	}
	if o.revision != "" {
		ann["org.opencontainers.image.revision"] = o.revision
	}
	if len(ann) > 0 {
		idx = mutate.Annotations(idx, ann).(v1.ImageIndex)
	}
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	dir, err := os.MkdirTemp("", "podwire-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          o.name,
		"org.opencontainers.image.ref.name": o.name,
	})); err != nil {
		return v1.Hash{}, err
	}
	return digest, tarDir(dir, o.out)
}

// platformImage is one OCI image: a layer of the binaries of p.dir, PATH=/,
// the entrypoint, the platform in its config.
func platformImage(p platformDir, bins []string, entrypoint string) (v1.Image, error) {
	paths := make([]string, len(bins))
	for i, b := range bins {
		paths[i] = filepath.Join(p.dir, b)
	}
	layerTar, err := binariesTar(paths)
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
	cf.OS, cf.Architecture = p.os, p.arch
	cf.Config.Entrypoint = []string{entrypoint}
	cf.Config.Env = []string{"PATH=/"}
	cf.Created = v1.Time{Time: epoch}
	return mutate.ConfigFile(img, cf)
}

// binariesTar is a layer with each file at the root, mode 0755, owned by
// root, at the epoch.
func binariesTar(paths []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.Base(p), Mode: 0o755, Size: int64(len(data)),
			Typeflag: tar.TypeReg, ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), tw.Close()
}

// tarDir writes the OCI layout in dir as a tar archive at out (atomically).
func tarDir(dir, out string) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name, hdr.ModTime = rel, epoch
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			src, err := os.Open(path)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
