package install

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// TestConfFilesAsLibcni: the conf dir listing is libcni's, file for file
// and in order, for the names runtimes meet (a directory with a conf
// extension, other extensions, backups such as Cilium's *.cilium_bak).
func TestConfFilesAsLibcni(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"10-flannel.conflist", "05-cilium.conflist.cilium_bak", "99-loopback.conf", "00-podwire.conflist", "20-x.json", "README", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "30-dir.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := ConfFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := libcni.ConfFiles(dir, ConfExtensions)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || len(got) != 4 {
		t.Fatalf("ConfFiles = %v, libcni.ConfFiles = %v", got, want)
	}
	if got, err := ConfFiles(filepath.Join(dir, "missing")); got != nil || err != nil {
		t.Fatalf("a missing dir: %v, %v; want none and no error", got, err)
	}
}
