package main

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podwire/podwire/tools/image/ociimage"
)

// buildOptions are build's flags: the binaries bins, taken from each
// platform's directory, go into that platform's image.
type buildOptions struct {
	out, name, entrypoint string
	version, revision     string
	platforms             platformFlags
	bins                  []string
}

// build writes the archive and returns the index's digest.
func build(o buildOptions) (v1.Hash, error) {
	if len(o.platforms) == 0 || len(o.bins) == 0 {
		return v1.Hash{}, fmt.Errorf("build: need at least one -platform and one binary")
	}
	var images []v1.Image
	for _, p := range o.platforms {
		img, err := platformImage(p, o.bins, o.entrypoint)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("image for %s/%s: %w", p.os, p.arch, err)
		}
		images = append(images, img)
	}
	ann := map[string]string{}
	if o.version != "" {
		ann["org.opencontainers.image.version"] = o.version
	}
	if o.revision != "" {
		ann["org.opencontainers.image.revision"] = o.revision
	}
	idx, err := ociimage.Index(images, ann)
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	return digest, ociimage.WriteIndexArchive(o.out, o.name, idx)
}

// platformImage is one image: the binaries of p.dir at the root (mode
// 0755), PATH=/, the entrypoint, the platform in its config.
func platformImage(p platformDir, bins []string, entrypoint string) (v1.Image, error) {
	files := make([]ociimage.File, len(bins))
	for i, b := range bins {
		data, err := os.ReadFile(filepath.Join(p.dir, b))
		if err != nil {
			return nil, err
		}
		files[i] = ociimage.File{Path: filepath.Base(b), Mode: 0o755, Data: data}
	}
	return ociimage.Image(files, ociimage.Config{
		Entrypoint:   []string{entrypoint},
		Env:          []string{"PATH=/"},
		OS:           p.os,
		Architecture: p.arch,
	})
}
