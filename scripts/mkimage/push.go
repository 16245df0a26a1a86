package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// push uploads the index of the OCI archive (build's output) to ref and
// returns ref's repository, tag and digest: "repo:tag@sha256:...".
func push(ctx context.Context, archive, ref string, insecure bool) (string, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("bad image reference %q (want registry/repository:tag): %w", ref, err)
	}
	dir, err := os.MkdirTemp("", "podwire-push-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := untar(archive, dir); err != nil {
		return "", fmt.Errorf("failed to read %s: %w", archive, err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return "", fmt.Errorf("%s is not an OCI archive: %w", archive, err)
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
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("failed to push %s: %w", tag, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return "", err
	}
	return tag.String() + "@" + digest.String(), nil
}

// untar extracts the regular files and directories of a tar file into
// dir, refusing names that would leave it.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, hdr.Name)
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			return fmt.Errorf("entry %q leaves the archive", hdr.Name)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			out, err := os.Create(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}
