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
// first), e.g. 00-podwire.conflist. Unchanged content is not rewritten.
func Derive(primary, derived string, entry []byte) (changed bool, err error) {
	data, err := os.ReadFile(primary)
	if err != nil {
		return false, fmt.Errorf("failed to read conflist %q: %w", primary, err)
	}
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
		return false, nil
	}
	return true, atomicfile.WriteFile(derived, out, 0o644)
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
