package sbom

import (
	cdx "github.com/CycloneDX/cyclonedx-go"

	"runtime/debug"
	"testing"
)

// TestReplacedModules: a module replaced by a directory of this
// repository is listed under its own path at the image's version, one
// replaced by another module version under the replacement.
func TestReplacedModules(t *testing.T) {
	b := builder{img: Image{Version: "v1.2.3"}, modules: map[string]cdx.Component{}}
	for _, tc := range []struct {
		m    debug.Module
		want string
	}{
		{debug.Module{Path: "github.com/podwire/podwire", Version: "v0.0.0", Replace: &debug.Module{Path: "../../", Version: "(devel)"}},
			"pkg:golang/github.com/podwire/podwire@v1.2.3"},
		{debug.Module{Path: "example.com/a", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/b", Version: "v1.1.0"}},
			"pkg:golang/example.com/b@v1.1.0"},
		{debug.Module{Path: "example.com/c", Version: "v0.3.0"}, "pkg:golang/example.com/c@v0.3.0"},
	} {
		if got := b.addModule(&tc.m); got != tc.want {
			t.Errorf("%s: bom-ref %s, want %s", tc.m.Path, got, tc.want)
		}
		if c := b.modules[tc.want]; c.PackageURL != tc.want {
			t.Errorf("%s: component %+v", tc.m.Path, c)
		}
	}
}
