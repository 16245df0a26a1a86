package main

import (
	"context"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

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
	top, err := ociimage.OpenArchive(archive, dir)
	if err != nil {
		return "", err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return "", err
	}
	if len(im.Manifests) != 1 || !im.Manifests[0].MediaType.IsIndex() {
		return "", fmt.Errorf("%s holds %d entries, want one image index (make image)", archive, len(im.Manifests))
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		return "", err
	}
	digest, err := ociimage.Push(ctx, ref, idx, ociimage.PushOptions{Insecure: insecure, Keychain: authn.DefaultKeychain})
	if err != nil {
		return "", err
	}
	return tag.String() + "@" + digest.String(), nil
}
