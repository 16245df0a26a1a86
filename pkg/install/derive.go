package install

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podwire/podwire/pkg/atomicfile"
)

// InstallBinary copies the executable src into binDir as podwire, atomically
// (a running plugin keeps its old inode), unless it is there already with
// the same content.
func InstallBinary(src, binDir string) (path string, changed bool, err error) {
	path = filepath.Join(binDir, PluginType)
	changed, err = copyBinary(src, path)
	return path, changed, err
}

// Derive writes derived, a conflist of its own holding the primary's
// conflist with the podwire entry appended (entry nil: DefaultEntry), as
// Cilium's chaining mode does: the primary's file is never touched. derived
// must sort before the primary's file in the conf dir (a runtime uses the
// first), e.g. 00-podwire.conflist. derived gets the primary's permission
// bits, which it holds a copy of (a 0600 conflist may name credentials),
// and follows a change of them. Unchanged content is not rewritten.
func Derive(primary, derived string, entry []byte) (changed bool, err error) {
	data, err := os.ReadFile(primary)
	if err != nil {
		return false, fmt.Errorf("failed to read conflist %q: %w", primary, err)
	}
	fi, err := os.Stat(primary)
	if err != nil {
		return false, fmt.Errorf("failed to stat conflist %q: %w", primary, err)
	}
	mode := fi.Mode().Perm()
	if !isConflist(data) {
		if data, err = ConvertConf(data); err != nil {
			return false, fmt.Errorf("failed to convert %q to a conflist: %w", primary, err)
		}
	}
	out, _, err := AddEntry(data, entry)
	if err != nil {
		return false, fmt.Errorf("failed to derive a conflist from %q: %w", primary, err)
	}
	if old, err := os.ReadFile(derived); err == nil && bytes.Equal(old, out) {
		return false, keepMode(derived, mode)
	}
	// WriteFile keeps the mode of a file it replaces: set it after.
	if err := atomicfile.WriteFile(derived, out, mode); err != nil {
		return false, err
	}
	return true, keepMode(derived, mode)
}

// keepMode sets path's permission bits to mode when they differ.
func keepMode(path string, mode os.FileMode) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("failed to stat %q: %w", path, err)
	}
	if fi.Mode().Perm() == mode {
		return nil
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("failed to set the mode of %q to %o: %w", path, mode, err)
	}
	return nil
}

// isConflist reports whether data has a "plugins" list (not a single .conf).
func isConflist(data []byte) bool {
	o, err := parseObject(data)
	if err != nil {
		return true // let AddEntry report the error
	}
	_, ok := o.get("plugins")
	return ok
}
