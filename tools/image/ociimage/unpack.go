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
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Unpack writes img's filesystem (its layers flattened, as a runtime's
// snapshotter would) under dir: directories, regular files with their
// modes, and symlinks. An entry whose name leaves dir is an error; other
// entry types (devices, hard links) are an error too, since this package
// never writes them. A test can then chroot into dir and run the image's
// programs.
func Unpack(img v1.Image, dir string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	root := filepath.Clean(dir) + string(filepath.Separator)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, hdr.Name)
		if !strings.HasPrefix(p+string(filepath.Separator), root) {
			return fmt.Errorf("entry %q leaves the image root", hdr.Name)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(hdr.Mode).Perm())
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.Symlink(hdr.Linkname, p)
			}
		case tar.TypeReg:
			err = writeFile(p, tr, os.FileMode(hdr.Mode).Perm())
		default:
			err = fmt.Errorf("entry %q has type %q, which Unpack does not write", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(p string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
