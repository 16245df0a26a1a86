package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFixedTempRefusesSymlink: a symlink planted at a record's fixed
// temporary name is not followed (its target keeps its content) and the
// write fails; the record is written once the link is gone.
func TestFixedTempRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "victim")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "c1_eth0.json")
	if err := os.Symlink(target, TempName(path)); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileFixedTemp(path, []byte(`{}`), 0o600); err == nil {
		t.Fatal("the write followed a symlink at the temporary name")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("the symlink's target was overwritten: %q", b)
	}
	if err := RemoveTemp(path); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileFixedTemp(path, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != `{}` {
		t.Fatalf("record %q", b)
	}
}
