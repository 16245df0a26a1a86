package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// rootDir is the repository's top, the root module of the binaries.
const rootDir = "../.."

// buildProduct builds the image's binaries of the root module (the agent
// and the plugin) for linux on this machine's architecture into a new
// directory, with the flags of `make image` (scripts/image.sh), so that the
// Go build cache of a `make build` serves them.
func buildProduct(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, pkg := range []string{"./cmd/podwire-agent", "./plugins/podwire"} {
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", filepath.Join(dir, filepath.Base(pkg)), pkg)
		cmd.Dir = rootDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return dir
}

// goSum is the root module's go.sum: "path version" to its h1: hash.
func goSum(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(rootDir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if f := strings.Fields(s.Text()); len(f) == 3 && !strings.HasSuffix(f[1], "/go.mod") {
			sums[f[0]+" "+f[1]] = f[2]
		}
	}
	return sums
}

// moduleVersion is the version of module path that the root module builds
// with, as the go command resolves it.
func moduleVersion(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", path)
	cmd.Dir = rootDir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", path, err)
	}
	return strings.TrimSpace(string(out))
}

// TestSBOMInPushedIndex builds the image from the real agent and plugin,
// pushes it to go-containerregistry's in-process registry, and reads the
// pushed index back as a client would: one manifest in it has the
// CycloneDX artifactType and platform unknown/unknown, and its one layer
// is a BOM (decoded by cyclonedx-go) listing each binary with its SHA-256
// and the modules each links, at the versions and go.sum hashes the root
// module builds with. The control: the plugin, which must not link
// client-go, is not said to depend on it.
func TestSBOMInPushedIndex(t *testing.T) {
	bins := buildProduct(t)
	plat := "linux/" + runtime.GOARCH
	archive := filepath.Join(t.TempDir(), "image.tar")
	var out, errOut bytes.Buffer
	if rc := run([]string{"build", "-o", archive, "-name", "ghcr.io/podwire/podwire-agent:v9.9.9",
		"-version", "v9.9.9", "-revision", "abc", "-platform", plat + "=" + bins,
		"podwire-agent", "podwire"}, &out, &errOut); rc != 0 {
		t.Fatalf("build: rc %d: %s", rc, errOut.String())
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/podwire/podwire-agent:v9.9.9"
	out.Reset()
	if rc := run([]string{"push", archive, ref}, &out, &errOut); rc != 0 {
		t.Fatalf("push: rc %d: %s", rc, errOut.String())
	}
	pinned, err := name.NewDigest(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(pinned)
	if err != nil {
		t.Fatalf("pull %s: %v", pinned, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var sbomDesc []v1.Descriptor
	for _, m := range im.Manifests {
		if m.ArtifactType == "application/vnd.cyclonedx+json" {
			sbomDesc = append(sbomDesc, m)
		} else if m.Platform == nil || m.Platform.OS+"/"+m.Platform.Architecture != plat {
			t.Errorf("index lists %s with platform %v, want %s", m.Digest, m.Platform, plat)
		}
	}
	if len(sbomDesc) != 1 {
		t.Fatalf("index lists %d CycloneDX manifests, want 1: %+v", len(sbomDesc), im.Manifests)
	}
	if p := sbomDesc[0].Platform; p == nil || p.OS != "unknown" || p.Architecture != "unknown" {
		t.Errorf("the SBOM is listed with platform %v, want unknown/unknown (runtimes skip it)", p)
	}
	art, err := remote.Image(pinned.Context().Digest(sbomDesc[0].Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := art.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != "application/vnd.cyclonedx+json" || m.Config.MediaType != types.OCIEmptyJSON || m.Config.Size != 2 ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != "application/vnd.cyclonedx+json" {
		t.Fatalf("SBOM manifest %+v: want an OCI artifact, the empty config and one CycloneDX layer", m)
	}
	layer, err := art.LayerByDigest(m.Layers[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layer.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(rc, cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatalf("the SBOM layer is not CycloneDX JSON: %v", err)
	}

	if bom.Metadata == nil || bom.Metadata.Component == nil || bom.Metadata.Component.Name != "ghcr.io/podwire/podwire-agent" ||
		bom.Metadata.Component.Version != "v9.9.9" {
		t.Errorf("the BOM describes %+v, want ghcr.io/podwire/podwire-agent v9.9.9", bom.Metadata)
	}
	comps := map[string]cdx.Component{}
	for _, c := range *bom.Components {
		comps[c.BOMRef] = c
	}
	deps := map[string][]string{}
	for _, d := range *bom.Dependencies {
		if d.Dependencies != nil {
			deps[d.Ref] = *d.Dependencies
		}
	}
	sums := goSum(t)
	for _, tc := range []struct {
		bin     string
		modules []string // modules the binary links
		not     []string // modules it must not link
	}{
		{"podwire-agent", []string{"k8s.io/client-go", "github.com/google/nftables"}, nil},
		{"podwire", []string{"github.com/containernetworking/cni", "github.com/containernetworking/plugins", "github.com/google/nftables"}, []string{"k8s.io/client-go"}},
	} {
		data, err := os.ReadFile(filepath.Join(bins, tc.bin))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		ref := plat + "/" + tc.bin
		c, ok := comps[ref]
		if !ok || c.Type != cdx.ComponentTypeApplication || c.Hashes == nil || (*c.Hashes)[0].Value != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: component %+v, want an application with SHA-256 %x", tc.bin, c, sum)
		}
		linked := deps[ref]
		if !slices.Contains(linked, "pkg:golang/github.com/podwire/podwire@v9.9.9") {
			t.Errorf("%s: does not depend on the main module: %v", tc.bin, linked)
		}
		if want := "pkg:golang/stdlib@" + strings.TrimPrefix(runtime.Version(), "go"); !slices.Contains(linked, want) {
			t.Errorf("%s: does not depend on %s: %v", tc.bin, want, linked)
		}
		for _, mod := range tc.modules {
			v := moduleVersion(t, mod)
			purl := "pkg:golang/" + mod + "@" + v
			if !slices.Contains(linked, purl) {
				t.Errorf("%s: does not depend on %s: %v", tc.bin, purl, linked)
			}
			mc := comps[purl]
			h1, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(sums[mod+" "+v], "h1:"))
			if mc.Name != mod || mc.Version != v || mc.PackageURL != purl || mc.Hashes == nil || (*mc.Hashes)[0].Value != hex.EncodeToString(h1) {
				t.Errorf("%s: component %+v, want %s %s with go.sum's hash %s", tc.bin, mc, mod, v, sums[mod+" "+v])
			}
		}
		for _, mod := range tc.not {
			for _, l := range linked {
				if strings.HasPrefix(l, "pkg:golang/"+mod+"@") {
					t.Errorf("%s: said to link %s", tc.bin, l)
				}
			}
		}
	}

	// mkimage sbom reads the same BOM from the registry and the archive.
	want, err := sbomLayer(art, m.Layers[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{pinned.String(), archive} {
		out.Reset()
		if rc := run([]string{"sbom", src}, &out, &errOut); rc != 0 {
			t.Fatalf("sbom %s: rc %d: %s", src, rc, errOut.String())
		}
		if !bytes.Equal(out.Bytes(), want) {
			t.Errorf("sbom %s printed %d bytes, not the pushed layer's %d", src, out.Len(), len(want))
		}
	}
}

func sbomLayer(img v1.Image, h v1.Hash) ([]byte, error) {
	l, err := img.LayerByDigest(h)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}
