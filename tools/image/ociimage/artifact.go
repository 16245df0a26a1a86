package ociimage

import (
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ArtifactPlatform is the platform an index lists an artifact with,
// unknown/unknown, as buildx lists its attestations. Runtimes choose a
// manifest of an index by platform, and both containerd
// (images.FilterPlatforms) and CRI-O (containers/image's ChooseInstance)
// take an entry without a platform as a candidate for every node: a
// platform that no node has keeps them from pulling or running the
// artifact.
var ArtifactPlatform = v1.Platform{OS: "unknown", Architecture: "unknown"}

// emptyConfig is the OCI empty descriptor's content, the config of an
// artifact that has none (image-spec manifest.md, "Guidance for an Empty
// Descriptor").
var emptyConfig = []byte("{}")

// Artifact is an OCI 1.1 artifact (image-spec manifest.md, "Guidelines for
// Artifact Usage"): an image manifest whose artifactType is artifactType,
// whose config is the empty descriptor and whose one layer is data, of
// media type artifactType, titled title (org.opencontainers.image.title,
// the file name `oras pull` writes it to). With subject set, it is a
// referrer of subject (the registry's referrers API lists it).
func Artifact(artifactType, title string, data []byte, subject *v1.Descriptor) (v1.Image, error) {
	layer := static.NewLayer(data, types.MediaType(artifactType))
	ld, err := partial.Descriptor(layer)
	if err != nil {
		return nil, err
	}
	ld.Annotations = map[string]string{"org.opencontainers.image.title": title}
	cd, err := partial.Descriptor(static.NewLayer(emptyConfig, types.OCIEmptyJSON))
	if err != nil {
		return nil, err
	}
	cd.Data = emptyConfig
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  artifactType,
		Config:        *cd,
		Layers:        []v1.Descriptor{*ld},
		Subject:       subject,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, config: cd.Digest, layer: layer, layerDigest: ld.Digest})
}

// artifact is Artifact's image: a manifest, the empty config and one layer.
type artifact struct {
	manifest            []byte
	config, layerDigest v1.Hash
	layer               v1.Layer
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return emptyConfig, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	switch h {
	case a.layerDigest:
		return a.layer, nil
	case a.config:
		return static.NewLayer(emptyConfig, types.OCIEmptyJSON), nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}

func manifestArtifactType(raw []byte) (string, error) {
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", err
	}
	return m.ArtifactType, nil
}

// WithArtifact is idx with art (Artifact's) appended, listed with its
// artifactType and ArtifactPlatform, so that runtimes pulling idx for a
// node leave it alone while it travels with the index (a push, an
// archive).
func WithArtifact(idx v1.ImageIndex, art v1.Image) (v1.ImageIndex, error) {
	raw, err := art.RawManifest()
	if err != nil {
		return nil, err
	}
	at, err := manifestArtifactType(raw)
	if err != nil {
		return nil, err
	}
	p := ArtifactPlatform
	return mutate.AppendManifests(idx, mutate.IndexAddendum{
		Add:        art,
		Descriptor: v1.Descriptor{ArtifactType: at, Platform: &p},
	}), nil
}
