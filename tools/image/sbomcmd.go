package main

import (
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/podwire/podwire/tools/image/sbom"
)

// readSBOM returns the SBOM that build attached to the image index at src:
// an OCI archive (a file) or a reference in a registry ("repo:tag",
// "repo@sha256:..."), read with the Docker config's credentials.
func readSBOM(src string, insecure bool) ([]byte, error) {
	if _, err := os.Stat(src); err == nil {
		dir, err := os.MkdirTemp("", "podwire-sbom-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		idx, _, err := openIndex(src, dir)
		if err != nil {
			return nil, err
		}
		return indexSBOM(idx)
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(src, opts...)
	if err != nil {
		return nil, fmt.Errorf("%q is neither a file nor an image reference: %w", src, err)
	}
	idx, err := remote.Index(ref, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		return nil, fmt.Errorf("failed to read the index %s: %w", ref, err)
	}
	return indexSBOM(idx)
}

// indexSBOM is the layer of idx's one manifest whose artifactType is
// sbom.MediaType.
func indexSBOM(idx v1.ImageIndex) ([]byte, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var found []v1.Descriptor
	for _, m := range im.Manifests {
		if m.ArtifactType == sbom.MediaType {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("the index lists %d manifests of artifactType %s, want one", len(found), sbom.MediaType)
	}
	art, err := idx.Image(found[0].Digest)
	if err != nil {
		return nil, err
	}
	layers, err := art.Layers()
	if err != nil {
		return nil, err
	}
	if len(layers) != 1 {
		return nil, fmt.Errorf("the SBOM manifest %s has %d layers, want one", found[0].Digest, len(layers))
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}
