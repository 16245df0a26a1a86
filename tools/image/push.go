package main

import (
	"context"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podwire/podwire/tools/image/ociimage"
)

// push uploads the index of the OCI archive (build's output) to ref and
// returns ref's repository, tag and digest: "repo:tag@sha256:...".
func push(ctx context.Context, archive, ref string, insecure bool) (string, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	// Checked before the archive is read, so a bad reference is reported
	// as such whatever the file holds.
	tag, err := name.NewTag(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("bad image reference %q (want registry/repository:tag): %w", ref, err)
	}
	dir, err := os.MkdirTemp("", "podwire-push-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	idx, _, err := openIndex(archive, dir)
	if err != nil {
		return "", err
	}
	digest, err := ociimage.Push(ctx, ref, idx, ociimage.PushOptions{Insecure: insecure, Keychain: authn.DefaultKeychain})
	if err != nil {
		return "", err
	}
	return tag.String() + "@" + digest.String(), nil
}

// openIndex extracts the OCI archive (build's output) into dir and returns
// the one image index it holds and that index's descriptor in index.json,
// whose annotations name the image. The index reads its blobs from dir.
func openIndex(archive, dir string) (v1.ImageIndex, v1.Descriptor, error) {
	top, err := ociimage.OpenArchive(archive, dir)
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	if len(im.Manifests) != 1 || !im.Manifests[0].MediaType.IsIndex() {
		return nil, v1.Descriptor{}, fmt.Errorf("%s holds %d entries, want one image index (make image)", archive, len(im.Manifests))
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	return idx, im.Manifests[0], err
}

// archiveRef is the archive's image pinned by its index digest,
// "repository:tag@sha256:...": what push prints after pushing it to the
// reference the archive records (io.containerd.image.name), the same
// index being the same bytes wherever it is.
func archiveRef(archive string) (string, error) {
	dir, err := os.MkdirTemp("", "podwire-digest-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	_, desc, err := openIndex(archive, dir)
	if err != nil {
		return "", err
	}
	ref := desc.Annotations[ociimage.AnnotationContainerdName]
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", fmt.Errorf("%s records the image name %q: %w", archive, ref, err)
	}
	return tag.String() + "@" + desc.Digest.String(), nil
}
