package ociimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Archive annotations on the top descriptor of an archive: containerd's
// `ctr images import` names the image from the first, OCI tools from the
// second.
const (
	AnnotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// WriteArchive writes img to path as an OCI archive (an OCI image layout,
// https://github.com/opencontainers/image-spec/blob/main/image-layout.md,
// in a tar) whose index.json names it ref, for `ctr images import`. The
// file is replaced atomically.
func WriteArchive(path, ref string, img v1.Image) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	return writeLayout(path, func(lp layout.Path) error {
		return lp.AppendImage(img, layout.WithAnnotations(refAnnotations(ref)),
			layout.WithPlatform(v1.Platform{OS: cf.OS, Architecture: cf.Architecture}))
	})
}

// WriteIndexArchive writes idx to path as an OCI archive whose index.json
// names it ref; `ctr images import` unpacks the node's platform from it.
func WriteIndexArchive(path, ref string, idx v1.ImageIndex) error {
	return writeLayout(path, func(lp layout.Path) error {
		return lp.AppendIndex(idx, layout.WithAnnotations(refAnnotations(ref)))
	})
}

func refAnnotations(ref string) map[string]string {
	return map[string]string{AnnotationContainerdName: ref, annotationRefName: ref}
}

// writeLayout writes an OCI layout with add in a temporary directory and
// tars it at path.
func writeLayout(path string, add func(layout.Path) error) error {
	dir, err := os.MkdirTemp("", "podwire-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := add(lp); err != nil {
		return fmt.Errorf("failed to write the OCI layout: %w", err)
	}
	return tarDir(dir, path)
}

// tarDir writes the tree under dir as a tar at out, at Epoch and owned by
// root, in filepath.Walk's (lexical) order, through a temporary file
// renamed into place.
func tarDir(dir, out string) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name, hdr.ModTime = filepath.ToSlash(rel), Epoch
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("failed to write %s: %w", out, err)
	}
	return os.Rename(tmp, out)
}

// OpenArchive extracts the OCI archive at archive (WriteArchive's,
// WriteIndexArchive's or another tool's) into dir and returns its
// top-level index, index.json. The index reads its blobs from dir lazily:
// the caller removes dir only when done with it.
func OpenArchive(archive, dir string) (v1.ImageIndex, error) {
	if err := untar(archive, dir); err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", archive, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI archive: %w", archive, err)
	}
	return idx, nil
}

// untar extracts the regular files and directories of the tar file archive
// into dir; an entry whose name leaves dir is an error.
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
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
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
