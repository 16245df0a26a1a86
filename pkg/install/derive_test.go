package install

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDeriveKeepsPrimaryMode: the derived conflist holds a copy of the
// primary's, so it is no more readable than the primary (a 0600 conflist
// may name credentials), and it follows a change of the primary's mode
// even when its content stays the same.
func TestDeriveKeepsPrimaryMode(t *testing.T) {
	primary, _, _ := fixture(t, "10-ptp.conflist", ptpList) // 0600
	derived := filepath.Join(filepath.Dir(primary), "00-podwire.conflist")
	mode := func() os.FileMode {
		t.Helper()
		fi, err := os.Stat(derived)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	changed, err := Derive(primary, derived, nil)
	if err != nil || !changed {
		t.Fatalf("Derive: changed %v, %v", changed, err)
	}
	if m := mode(); m != 0o600 {
		t.Errorf("derived conflist of a 0600 primary has mode %o, want 600", m)
	}
	if err := os.Chmod(primary, 0o640); err != nil {
		t.Fatal(err)
	}
	if changed, err = Derive(primary, derived, nil); err != nil || changed {
		t.Fatalf("second Derive: changed %v (want false: same content), %v", changed, err)
	}
	if m := mode(); m != 0o640 {
		t.Errorf("derived conflist after the primary became 0640 has mode %o, want 640", m)
	}
}
