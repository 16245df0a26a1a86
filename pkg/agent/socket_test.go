package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestEnsureStateDir: stateDir ends 0700 whoever created it (the kubelet's
// hostPath DirectoryOrCreate makes it 0755), and a symlink or a file in its
// place is an error, not followed.
func TestEnsureStateDir(t *testing.T) {
	base := t.TempDir()
	fresh := filepath.Join(base, "fresh", "podwire")
	kubelet := filepath.Join(base, "kubelet")
	if err := os.Mkdir(kubelet, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(kubelet, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	for _, dir := range []string{fresh, kubelet} {
		if err := ensureStateDir(dir); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v (%v), want 0700", dir, fi.Mode().Perm(), err)
		}
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(kubelet, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{link, file} {
		if err := ensureStateDir(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
