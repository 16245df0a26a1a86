package main

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestBuildAndPush builds a two-platform archive from fake binaries, pushes
// it to go-containerregistry's in-process registry on loopback (plain HTTP,
// no flag needed) and reads it back by the printed digest: an index with
// one image per platform, each with that platform's files at the root.
func TestBuildAndPush(t *testing.T) {
	dir := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		d := filepath.Join(dir, "linux_"+arch)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range []string{"podwire-agent", "podwire"} {
			if err := os.WriteFile(filepath.Join(d, b), []byte(b+" for "+arch), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	archive := filepath.Join(dir, "image.tar")
	var out, errOut bytes.Buffer
	if rc := run([]string{"build", "-o", archive, "-name", "ghcr.io/podwire/podwire-agent:v9.9.9",
		"-version", "v9.9.9", "-revision", "abc",
		"-platform", "linux/amd64=" + filepath.Join(dir, "linux_amd64"),
		"-platform", "linux/arm64=" + filepath.Join(dir, "linux_arm64"),
		"podwire-agent", "podwire"}, &out, &errOut); rc != 0 {
		t.Fatalf("build: rc %d: %s", rc, errOut.String())
	}
	t.Logf("build: %s", out.String())

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/podwire/podwire-agent:v9.9.9"
	out.Reset()
	if rc := run([]string{"push", archive, ref}, &out, &errOut); rc != 0 {
		t.Fatalf("push: rc %d: %s", rc, errOut.String())
	}
	pinned := strings.TrimSpace(out.String())
	t.Logf("push: %s", pinned)
	if !strings.HasPrefix(pinned, ref+"@sha256:") {
		t.Fatalf("push printed %q, want %s@sha256:...", pinned, ref)
	}

	// digest computes, from the archive, the reference push printed.
	var digestOut bytes.Buffer
	if rc := run([]string{"digest", archive}, &digestOut, &errOut); rc != 0 {
		t.Fatalf("digest: rc %d: %s", rc, errOut.String())
	}
	if got, want := strings.TrimSpace(digestOut.String()), "ghcr.io/podwire/podwire-agent:v9.9.9"+pinned[strings.Index(pinned, "@"):]; got != want {
		t.Errorf("digest printed %q, want %q", got, want)
	}

	// The tag and the digest name the same index.
	byDigest, err := name.NewDigest(pinned)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(byDigest)
	if err != nil {
		t.Fatalf("pull %s: %v", byDigest, err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	byTag, err := remote.Head(tag)
	if err != nil {
		t.Fatal(err)
	}
	if byTag.Digest.String() != byDigest.DigestStr() {
		t.Errorf("tag %s is %s, printed digest %s", ref, byTag.Digest, byDigest.DigestStr())
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if v := im.Annotations["org.opencontainers.image.version"]; v != "v9.9.9" {
		t.Errorf("index version annotation %q, want v9.9.9", v)
	}
	// Two images and the SBOM (TestSBOMInPushedIndex reads it).
	if len(im.Manifests) != 3 {
		t.Fatalf("index has %d manifests, want 3", len(im.Manifests))
	}
	for _, m := range im.Manifests {
		if m.ArtifactType == "application/vnd.cyclonedx+json" {
			continue
		}
		arch := m.Platform.Architecture
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != arch || m.Platform.OS != "linux" {
			t.Errorf("%s: descriptor %s/%s, config %s/%s", m.Digest, m.Platform.OS, arch, cf.OS, cf.Architecture)
		}
		if ep := cf.Config.Entrypoint; len(ep) != 1 || ep[0] != "/podwire-agent" {
			t.Errorf("%s: entrypoint %q", arch, ep)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v", arch, len(layers), err)
		}
		files := layerFiles(t, layers[0].Uncompressed)
		for _, b := range []string{"podwire-agent", "podwire"} {
			if want := b + " for " + arch; files[b] != want {
				t.Errorf("%s: /%s holds %q, want %q", arch, b, files[b], want)
			}
		}
	}
}

// TestBuildIsReproducible: the same binaries give the same index digest.
func TestBuildIsReproducible(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "podwire-agent"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	var digests []string
	for i := range 2 {
		var out, errOut bytes.Buffer
		archive := filepath.Join(dir, "image.tar")
		if rc := run([]string{"build", "-o", archive, "-name", "example.com/a:v1",
			"-platform", "linux/amd64=" + dir, "podwire-agent"}, &out, &errOut); rc != 0 {
			t.Fatalf("build %d: %s", i, errOut.String())
		}
		digests = append(digests, out.String())
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds differ:\n%s%s", digests[0], digests[1])
	}
}

// TestPushRefusesBadInput: a reference without a tag's registry form, or a
// file that is not an archive, fail with a message saying so.
func TestPushRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	notTar := filepath.Join(dir, "x.tar")
	if err := os.WriteFile(notTar, []byte("not a tar"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"digest ref", []string{"push", notTar, "example.com/a@sha256:0000"}, "bad image reference"},
		{"not an archive", []string{"push", notTar, "127.0.0.1:1/a:v1"}, "failed to read"},
		{"one arg", []string{"push", notTar}, "want ARCHIVE REF"},
	} {
		var out, errOut bytes.Buffer
		if rc := run(tc.args, &out, &errOut); rc == 0 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%s: rc %d, stderr %q, want an error containing %q", tc.name, rc, errOut.String(), tc.want)
		}
	}
}

func layerFiles(t *testing.T, open func() (io.ReadCloser, error)) map[string]string {
	t.Helper()
	rc, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[hdr.Name] = string(b)
	}
}
