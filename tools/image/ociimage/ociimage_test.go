package ociimage_test

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/podwire/podwire/internal/testns"
	"github.com/podwire/podwire/tools/image/ociimage"
)

// runIn unpacks img into a temporary root and runs argv there under
// chroot(8), returning its combined output: the proof that the image's
// files (programs, libraries, symlinks) are complete enough to run.
func runIn(t *testing.T, img v1.Image, argv ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := ociimage.Unpack(img, root); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	out, err := exec.Command("chroot", append([]string{root}, argv...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("chroot %q: %v: %s", argv, err, out)
	}
	return string(out)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chroot, network namespaces); make test runs it as root")
	}
}

// toolbox is an image with the host's busybox (static) as /bin/busybox
// and /bin/sh, /bin/cp symlinks to it, a data file, and the host's nft
// (dynamic) with its libraries: what flannel's install containers and
// nftables-mode daemons need.
func toolbox(t *testing.T) v1.Image {
	t.Helper()
	bb, err := ociimage.HostProgram("/usr/bin/busybox", "/bin/busybox")
	if err != nil {
		t.Fatalf("busybox (scripts/deps.list: busybox-static): %v", err)
	}
	if len(bb) != 1 {
		t.Fatalf("busybox is static, got %d files", len(bb))
	}
	nft, err := ociimage.HostProgram("/usr/sbin/nft", "")
	if err != nil {
		t.Fatalf("nft: %v", err)
	}
	if len(nft) < 3 {
		t.Fatalf("nft is dynamic: want it, a library and the loader, got %d files", len(nft))
	}
	files := append(bb,
		ociimage.Symlink("bin/sh", "busybox"),
		ociimage.Symlink("/bin/cp", "/bin/busybox"),
		ociimage.File{Path: "etc/conf.json", Mode: 0o644, Data: []byte(`{"a":1}`)})
	img, err := ociimage.Image(append(files, nft...), ociimage.Config{Entrypoint: []string{"/bin/sh"}, Env: []string{"PATH=/bin:/usr/sbin"}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImageRuns: programs of a built image run from its unpacked root,
// through symlinks, and a dynamic one finds its libraries and loader.
func TestImageRuns(t *testing.T) {
	needRoot(t)
	img := toolbox(t)
	if out := runIn(t, img, "/bin/sh", "-c", "cp -f /etc/conf.json /copy.json && busybox cat /copy.json"); out != `{"a":1}` {
		t.Errorf("sh -c cp: got %q", out)
	}
	if out := runIn(t, img, "/usr/sbin/nft", "--version"); !strings.HasPrefix(out, "nftables v") {
		t.Errorf("nft --version: got %q", out)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture == "" || cf.Config.Entrypoint[0] != "/bin/sh" || !cf.Created.Time.Equal(ociimage.Epoch) {
		t.Errorf("config: %s/%s entrypoint %q created %v", cf.OS, cf.Architecture, cf.Config.Entrypoint, cf.Created)
	}
}

// TestReproducible: the same files give the same digest, and a changed
// byte a different one.
func TestReproducible(t *testing.T) {
	build := func(data string) v1.Hash {
		img, err := ociimage.Image([]ociimage.File{{Path: "/a/b", Mode: 0o755, Data: []byte(data)}, ociimage.Symlink("c", "a/b")}, ociimage.Config{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if a, b := build("x"), build("x"); a != b {
		t.Errorf("same files, digests %s and %s", a, b)
	}
	if a, b := build("x"), build("y"); a == b {
		t.Errorf("different files, same digest %s", a)
	}
	if _, err := ociimage.Image([]ociimage.File{{Path: "../etc/passwd"}}, ociimage.Config{}); err == nil {
		t.Error("a path leaving the root was accepted")
	}
}

// TestArchive: the archive of an image and of an index name ref the way
// `ctr images import` reads it, and hold the same image.
func TestArchive(t *testing.T) {
	img, err := ociimage.Image([]ociimage.File{{Path: "pause", Mode: 0o755, Data: []byte("p")}}, ociimage.Config{Entrypoint: []string{"/pause"}})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	idx, err := ociimage.Index([]v1.Image{img}, map[string]string{"org.opencontainers.image.version": "v1"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		write func(path string) error
	}{
		{"image", func(p string) error { return ociimage.WriteArchive(p, "example.com/pause:1", img) }},
		{"index", func(p string) error { return ociimage.WriteIndexArchive(p, "example.com/pause:1", idx) }},
	} {
		p := filepath.Join(dir, tc.name+".tar")
		if err := tc.write(p); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		top, err := ociimage.OpenArchive(p, filepath.Join(dir, tc.name))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		im, err := top.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 || im.Manifests[0].Annotations["io.containerd.image.name"] != "example.com/pause:1" {
			t.Fatalf("%s: index.json %+v", tc.name, im.Manifests)
		}
		got := im.Manifests[0].Digest
		if tc.name == "index" {
			child, err := top.ImageIndex(got)
			if err != nil {
				t.Fatal(err)
			}
			cm, err := child.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if cm.Annotations["org.opencontainers.image.version"] != "v1" || cm.Manifests[0].Platform == nil {
				t.Errorf("index: %+v", cm)
			}
			got = cm.Manifests[0].Digest
		}
		if got != want {
			t.Errorf("%s: archive holds %s, want %s", tc.name, got, want)
		}
	}
}

// TestPushThroughNetNS pushes an image to a registry that listens only
// inside a throwaway netns (on that netns's own loopback), with a
// DialContext that dials from inside it, pulls it back by the returned
// digest the same way, and runs it.
func TestPushThroughNetNS(t *testing.T) {
	needRoot(t)
	netns := testns.New(t)
	var ln net.Listener
	if err := netns.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	dial := func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		err = netns.Do(func(ns.NetNS) error {
			var d net.Dialer
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}

	img := toolbox(t)
	ref := ln.Addr().String() + "/tools/toolbox:v1"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The control: from the host's netns the registry is not there.
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	if _, err := ociimage.Push(short, ref, img, ociimage.PushOptions{Insecure: true}); err == nil {
		t.Fatal("push without the netns dialer reached the registry")
	}
	digest, err := ociimage.Push(ctx, ref, img, ociimage.PushOptions{Insecure: true, DialContext: dial})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := img.Digest(); digest != want {
		t.Errorf("push returned %s, image is %s", digest, want)
	}
	pinned, err := name.NewDigest(ln.Addr().String()+"/tools/toolbox@"+digest.String(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DialContext: dial}
	defer tr.CloseIdleConnections()
	pulled, err := remote.Image(pinned, remote.WithContext(ctx), remote.WithTransport(tr))
	if err != nil {
		t.Fatalf("pull %s: %v", pinned, err)
	}
	if out := runIn(t, pulled, "/bin/sh", "-c", "echo pulled"); out != "pulled\n" {
		t.Errorf("pulled image: sh printed %q", out)
	}
}
