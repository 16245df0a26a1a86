package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestFixedTempNeverWritesThroughALink: a symlink or a hard link planted at
// a record's fixed temporary name is unlinked, never written through (its
// target keeps its content), and the record is written.
func TestFixedTempNeverWritesThroughALink(t *testing.T) {
	for _, plant := range []struct {
		name string
		link func(target, at string) error
	}{{"symlink", os.Symlink}, {"hard link", os.Link}} {
		dir := t.TempDir()
		target := filepath.Join(dir, "victim")
		if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "c1_eth0.json")
		if err := plant.link(target, TempName(path)); err != nil {
			t.Fatal(err)
		}
		if err := WriteFileFixedTemp(path, []byte(`{}`), 0o600); err != nil {
			t.Fatalf("%s: %v", plant.name, err)
		}
		if b, _ := os.ReadFile(target); string(b) != "keep" {
			t.Errorf("%s: the link's target was overwritten: %q", plant.name, b)
		}
		if b, _ := os.ReadFile(path); string(b) != `{}` {
			t.Errorf("%s: record %q", plant.name, b)
		}
	}
}

// TestCreateExclusive: a name that exists, as a file, a symlink (even a
// dangling one) or a hard link, is refused with fs.ErrExist and not
// touched.
func TestCreateExclusive(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard")
	if err := os.Link(victim, hard); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{victim, dangling, link, hard} {
		if f, err := CreateExclusive(name, 0o600); !errors.Is(err, fs.ErrExist) {
			if f != nil {
				f.Close()
			}
			t.Errorf("%s: %v, want fs.ErrExist", filepath.Base(name), err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dangling link's target was created: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("victim %q", b)
	}
	f, err := CreateExclusive(filepath.Join(dir, "new"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestWriteFileKeepsModeAndLeavesNoTemp: WriteFile replaces a file, keeps
// its mode, and leaves no temporary file.
func TestWriteFileKeepsModeAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "10-x.conflist")
	if err := os.WriteFile(path, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v %v, want 0640", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("content %q", b)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
