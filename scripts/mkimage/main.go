// Command mkimage builds podwire's image offline as an OCI archive (an OCI
// image layout in a tar) with go-containerregistry: one layer holding the
// static binaries at the root, no base image. The archive imports with
// `ctr -n k8s.io images import`, which names the image from the
// io.containerd.image.name annotation of the index.
//
//	go run ./scripts/mkimage -o bin/podwire-image.tar -name docker.io/podwire/podwire-agent:dev bin/podwire-agent bin/podwire
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	out := flag.String("o", "bin/podwire-image.tar", "OCI archive to write")
	name := flag.String("name", "docker.io/podwire/podwire-agent:dev", "image name recorded in the archive")
	entry := flag.String("entrypoint", "/podwire-agent", "entrypoint")
	flag.Parse()
	if err := build(*out, *name, *entry, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func build(out, name, entry string, bins []string) error {
	if len(bins) == 0 {
		return fmt.Errorf("no binaries given")
	}
	layerTar, err := binariesTar(bins)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = []string{entry}
	cf.Config.Env = []string{"PATH=/"}
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "podwire-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          name,
		"org.opencontainers.image.ref.name": name,
	})); err != nil {
		return err
	}
	return tarDir(dir, out)
}

// binariesTar is a layer with each binary at the root, mode 0755, owned by
// root, with a fixed time (a reproducible layer).
func binariesTar(bins []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, b := range bins {
		data, err := os.ReadFile(b)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.Base(b), Mode: 0o755, Size: int64(len(data)),
			Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
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
		hdr.Name, hdr.ModTime = rel, time.Unix(0, 0)
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
