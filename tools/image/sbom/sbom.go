// Package sbom describes what podwire's image holds as a CycloneDX bill of
// materials (https://cyclonedx.org/specification/overview/), written with
// github.com/CycloneDX/cyclonedx-go from the build information the Go
// toolchain puts into every binary (debug/buildinfo): the main module,
// every module linked with its version and go.sum hash, and the Go version.
//
// One BOM covers the image index, every platform's files: each file of the
// image is one component per platform (a Go binary an "application", with
// its SHA-256 and its GOOS, GOARCH and CGO_ENABLED; any other file a
// "file"), and each module one "library" component whatever number of
// binaries and platforms link it, since a scanner reports a module version
// once; the dependency graph says which binary links which modules. The Go
// standard library is the component "stdlib" (purl pkg:golang/stdlib@1.26.8),
// the name Syft gives it and Grype and Trivy match vulnerabilities on.
//
// The BOM is reproducible: no timestamp and no serial number, components
// and dependencies sorted, so the same binaries give the same bytes.
package sbom

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// MediaType is the BOM's media type, CycloneDX JSON (IANA registered): the
// artifactType of the OCI artifact that carries it.
const MediaType = "application/vnd.cyclonedx+json"

// SpecVersion is the CycloneDX version the BOM is written in: 1.6, which
// current scanners (Grype, Trivy, Dependency-Track) read.
const SpecVersion = cdx.SpecVersion1_6

// Image is what the BOM describes: Name the image's repository
// ("ghcr.io/podwire/podwire-agent"), Version its version (the tag,
// "v0.1.0"), Revision the commit it was built from (may be empty).
type Image struct {
	Name, Version, Revision string
}

// File is one file of the image: Path where it is in the image
// ("podwire-agent"), Platform the image's ("linux/amd64"), Source the file
// on this machine.
type File struct {
	Path, Platform, Source string
}

// New reads files and returns the BOM of img. Errors name the file that
// could not be read. A file that is not a Go binary is listed as a file
// with its hash and no modules.
func New(img Image, files []File) (*cdx.BOM, error) {
	b := builder{img: img, modules: map[string]cdx.Component{}}
	root := cdx.Dependency{Ref: rootRef}
	for _, f := range files {
		ref, err := b.addFile(f)
		if err != nil {
			return nil, err
		}
		root.Dependencies = appendRef(root.Dependencies, ref)
	}
	if root.Dependencies != nil {
		slices.Sort(*root.Dependencies)
	}
	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{Component: &cdx.Component{
		BOMRef:  rootRef,
		Type:    cdx.ComponentTypeContainer,
		Name:    img.Name,
		Version: img.Version,
	}}
	if img.Revision != "" {
		bom.Metadata.Component.Properties = &[]cdx.Property{{Name: "org.opencontainers.image.revision", Value: img.Revision}}
	}
	comps := b.files
	for _, c := range b.modules {
		comps = append(comps, c)
	}
	slices.SortFunc(comps, func(a, b cdx.Component) int { return strings.Compare(a.BOMRef, b.BOMRef) })
	deps := append([]cdx.Dependency{root}, b.deps...)
	slices.SortFunc(deps, func(a, b cdx.Dependency) int { return strings.Compare(a.Ref, b.Ref) })
	bom.Components = &comps
	bom.Dependencies = &deps
	return bom, nil
}

// Encode is bom as CycloneDX JSON of SpecVersion.
func Encode(bom *cdx.BOM) ([]byte, error) {
	var buf bytes.Buffer
	if err := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON).SetPretty(true).EncodeVersion(bom, SpecVersion); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// rootRef is the bom-ref of the image, the BOM's subject.
const rootRef = "image"

type builder struct {
	img     Image
	files   []cdx.Component
	modules map[string]cdx.Component // by bom-ref, the purl
	deps    []cdx.Dependency
}

// addFile adds f, and the modules of a Go binary, and returns f's bom-ref,
// "linux/amd64/podwire-agent".
func (b *builder) addFile(f File) (string, error) {
	data, err := os.ReadFile(f.Source)
	if err != nil {
		return "", fmt.Errorf("failed to read %s for the SBOM: %w", f.Source, err)
	}
	sum := sha256.Sum256(data)
	c := cdx.Component{
		BOMRef: f.Platform + "/" + f.Path,
		Type:   cdx.ComponentTypeFile,
		Name:   f.Path,
		Hashes: &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(sum[:])}},
	}
	// buildinfo fails on anything but a Go executable: the file is then
	// listed as a file, since an image may hold others (a config, a
	// script) that the BOM should name too.
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		b.files = append(b.files, c)
		return c.BOMRef, nil
	}
	c.Type = cdx.ComponentTypeApplication
	c.Version = b.img.Version
	c.Description = "Go package " + bi.Path + ", built with " + bi.GoVersion
	var props []cdx.Property
	for _, s := range bi.Settings {
		switch s.Key {
		case "GOOS", "GOARCH", "GOAMD64", "GOARM64", "GOARM", "CGO_ENABLED":
			// The names of CycloneDX's property taxonomy for a Go
			// build's environment (cyclonedx-gomod's).
			props = append(props, cdx.Property{Name: "cdx:gomod:build:env:" + s.Key, Value: s.Value})
		}
	}
	if len(props) > 0 {
		c.Properties = &props
	}
	b.files = append(b.files, c)

	dep := cdx.Dependency{Ref: c.BOMRef}
	mainMod := bi.Main
	if mainMod.Version == "" || mainMod.Version == "(devel)" {
		// A build from a checkout without VCS stamping says
		// "(devel)": the version the binaries are stamped with
		// (pkg/buildinfo) is the image's.
		mainMod.Version = b.img.Version
	}
	for _, m := range append([]*debug.Module{&mainMod}, bi.Deps...) {
		dep.Dependencies = appendRef(dep.Dependencies, b.addModule(m))
	}
	dep.Dependencies = appendRef(dep.Dependencies, b.addStdlib(bi.GoVersion))
	slices.Sort(*dep.Dependencies)
	b.deps = append(b.deps, dep)
	return c.BOMRef, nil
}

// addModule adds the module m links (its replacement when replaced) and
// returns its bom-ref, its purl. A module replaced by a directory
// (`replace github.com/podwire/podwire => ../..`) is this repository's
// source, listed under its own path at the image's version.
func (b *builder) addModule(m *debug.Module) string {
	if r := m.Replace; r != nil {
		if r.Version == "" || r.Version == "(devel)" {
			m = &debug.Module{Path: m.Path, Version: b.img.Version}
		} else {
			m = r
		}
	}
	purl := "pkg:golang/" + m.Path + "@" + m.Version
	if _, ok := b.modules[purl]; ok {
		return purl
	}
	c := cdx.Component{
		BOMRef:     purl,
		Type:       cdx.ComponentTypeLibrary,
		Name:       m.Path,
		Version:    m.Version,
		PackageURL: purl,
	}
	// go.sum's h1: hash is the SHA-256 of the module's file list and
	// hashes (golang.org/x/mod/sumdb/dirhash), as cyclonedx-gomod writes
	// it: what `go mod verify` checks a download against.
	if h, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
		if raw, err := base64.StdEncoding.DecodeString(h); err == nil && len(raw) == sha256.Size {
			c.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(raw)}}
		}
	}
	b.modules[purl] = c
	return purl
}

// addStdlib adds the Go standard library of goVersion ("go1.26.8") and
// returns its bom-ref.
func (b *builder) addStdlib(goVersion string) string {
	v := strings.TrimPrefix(goVersion, "go")
	purl := "pkg:golang/stdlib@" + v
	if _, ok := b.modules[purl]; !ok {
		b.modules[purl] = cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: "stdlib", Version: goVersion, PackageURL: purl}
	}
	return purl
}

func appendRef(refs *[]string, ref string) *[]string {
	if refs == nil {
		refs = &[]string{}
	}
	if !slices.Contains(*refs, ref) {
		*refs = append(*refs, ref)
	}
	return refs
}
