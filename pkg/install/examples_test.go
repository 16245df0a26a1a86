package install

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// TestExampleConflists loads every cni-conf/ example through libcni, as a
// runtime would, and checks that podwire is chained last with the
// annotations capability and that `podwire install` would not change it.
func TestExampleConflists(t *testing.T) {
	files, err := filepath.Glob("../../cni-conf/*.conflist")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("want at least 4 example conflists, found %v", files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			list, err := libcni.ConfListFromFile(f)
			if err != nil {
				t.Fatalf("%s: libcni cannot load it: %v", f, err)
			}
			last := list.Plugins[len(list.Plugins)-1]
			if last.Network.Type != PluginType {
				t.Fatalf("%s: last plugin is %q, want %q", f, last.Network.Type, PluginType)
			}
			if !last.Network.Capabilities[AnnotationsCapability] {
				t.Errorf("%s: podwire entry does not declare %q", f, AnnotationsCapability)
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, changed, err := AddEntry(data, nil); err != nil || changed {
				t.Errorf("%s: install would change it: changed=%v err=%v", f, changed, err)
			}
			// Removing and re-adding the entry gives the file back byte for
			// byte: the examples are in the installer's own layout.
			without, _, err := RemoveEntry(data)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := libcni.ConfListFromBytes(without); err != nil {
				t.Errorf("%s: conflist without podwire does not load: %v", f, err)
			}
			entry := list.Plugins[len(list.Plugins)-1].Bytes
			again, changed, err := AddEntry(without, entry)
			if err != nil || !changed {
				t.Fatalf("%s: re-adding: changed=%v err=%v", f, changed, err)
			}
			if !jsonEqual(again, data) {
				t.Errorf("%s: re-added conflist differs:\n%s", f, again)
			}
		})
	}
}
