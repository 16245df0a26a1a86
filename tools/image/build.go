package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podwire/podwire/tools/image/ociimage"
	"github.com/podwire/podwire/tools/image/sbom"
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
	if idx, err = withSBOM(idx, o); err != nil {
		return v1.Hash{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	return digest, ociimage.WriteIndexArchive(o.out, o.name, idx)
}

// withSBOM is idx with the SBOM of every file of every platform's image
// (package sbom) attached as an OCI artifact, so that a push or an archive
// of the index carries it.
func withSBOM(idx v1.ImageIndex, o buildOptions) (v1.ImageIndex, error) {
	repo, err := name.NewTag(o.name)
	if err != nil {
		return nil, fmt.Errorf("bad image name %q: %w", o.name, err)
	}
	var files []sbom.File
	for _, p := range o.platforms {
		for _, b := range o.bins {
			files = append(files, sbom.File{Path: filepath.Base(b), Platform: p.os + "/" + p.arch, Source: filepath.Join(p.dir, b)})
		}
	}
	bom, err := sbom.New(sbom.Image{Name: repo.Context().Name(), Version: o.version, Revision: o.revision}, files)
	if err != nil {
		return nil, err
	}
	data, err := sbom.Encode(bom)
	if err != nil {
		return nil, err
	}
	art, err := ociimage.Artifact(sbom.MediaType, sbomTitle, data, nil)
	if err != nil {
		return nil, err
	}
	return ociimage.WithArtifact(idx, art)
}

// sbomTitle is the SBOM layer's file name.
const sbomTitle = "sbom.cdx.json"

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
