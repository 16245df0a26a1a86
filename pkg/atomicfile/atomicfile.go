// Package atomicfile writes a file so that readers see the old content or
// the new, never a part: the CNI conflist, the installed binary and the
// node caches go through WriteFile, podwire's attachment records through
// WriteFileFixedTemp (the same, with a temporary file of a fixed name).
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// WriteFile replaces path with data so that a reader (a runtime
// loading its conf dir, a node starting a pod) sees either the old or the
// new content, never a partial file: the data goes to a temporary file in
// the same directory, is synced, and is renamed over path; the directory is
// synced after. An existing file's mode and owner are kept; a new file gets
// perm. The temporary file is "."+name+".<random>.tmp" (libcni does not load
// it; RemoveTemps finds what a killed writer left).
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, func(dir string) (*os.File, error) {
		return os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	})
}

// WriteFileFixedTemp is WriteFile for a path that one writer at a time
// writes, such as an attachment's record (a runtime never runs two
// operations on one attachment at once). Its temporary file has the fixed
// name TempName(path), so removing what a killed writer left is one unlink
// (RemoveTemp) instead of a listing of the whole directory, which DEL would
// otherwise pay per record on the node.
func WriteFileFixedTemp(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, func(string) (*os.File, error) {
		// O_NOFOLLOW: a symlink planted at the fixed name is refused
		// (ELOOP), never followed to overwrite its target.
		return os.OpenFile(TempName(path), os.O_RDWR|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	})
}

// TempName is the temporary file of WriteFileFixedTemp for path:
// "."+name+".tmp" in the same directory.
func TempName(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
}

// RemoveTemp removes the temporary file a WriteFileFixedTemp of path killed
// midway left; none is not an error.
func RemoveTemp(path string) error {
	if err := os.Remove(TempName(path)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("failed to remove %q: %w", TempName(path), err)
	}
	return nil
}

// write is WriteFile with the temporary file made by create(dir).
func write(path string, data []byte, perm os.FileMode, create func(dir string) (*os.File, error)) error {
	dir := filepath.Dir(path)
	uid, gid := -1, -1
	if fi, err := os.Stat(path); err == nil {
		perm = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	} else if !os.IsNotExist(err) {
		return fmt.Errorf("failed to stat %q: %w", path, err)
	}
	tmp, err := create(dir)
	if err != nil {
		return fmt.Errorf("failed to create a temporary file next to %q: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("failed to write %q: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("failed to set the mode of %q: %w", tmp.Name(), err)
	}
	if uid >= 0 {
		if err := tmp.Chown(uid, gid); err != nil {
			return fmt.Errorf("failed to set the owner of %q: %w", tmp.Name(), err)
		}
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("failed to sync %q: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("failed to close %q: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("failed to rename %q to %q: %w", tmp.Name(), path, err)
	}
	done = true
	return SyncDir(dir)
}

// SyncDir makes a rename in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("failed to open directory %q: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("failed to sync directory %q: %w", dir, err)
	}
	return nil
}

// RemoveTemps removes the temporary files that a WriteFile of path killed
// midway left next to it; none is not an error.
func RemoveTemps(path string) error {
	left, err := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp"))
	if err != nil {
		return err
	}
	for _, p := range left {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("failed to remove %q: %w", p, err)
		}
	}
	return nil
}
