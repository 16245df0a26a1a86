// Package atomicfile writes a file so that readers see the old content or
// the new, never a part: the CNI conflist, the installed binary and the
// node caches go through WriteFile, podwire's attachment records through
// WriteFileFixedTemp (the same, with a temporary file of a fixed name).
// ReadJSON reads such a file back where its absence means "none yet".
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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
// it; RemoveTemps finds what a killed writer left), made by CreateExclusive.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, func(dir string) (*os.File, error) {
		for range 10 {
			var r [8]byte
			_, _ = rand.Read(r[:])
			f, err := CreateExclusive(filepath.Join(dir, "."+filepath.Base(path)+"."+hex.EncodeToString(r[:])+".tmp"), 0o600)
			if !errors.Is(err, fs.ErrExist) {
				return f, err
			}
		}
		return nil, fmt.Errorf("no free temporary name next to %q", path)
	})
}

// CreateExclusive creates the new file name with perm, which must not
// exist: O_CREAT|O_EXCL, so that nothing planted at the name (a
// symlink, even a dangling one, or a hard link to another file) is followed
// or written through; O_NOFOLLOW says the same for the reader. It is the one
// way podwire creates its temporary files. An existing name is an error
// satisfying errors.Is(err, fs.ErrExist).
func CreateExclusive(name string, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
}

// OpenLock opens the lock file path that many processes share (an flock(2)
// target, never written): created with CreateExclusive when absent, else
// opened without following a link (O_NOFOLLOW) and refused unless it is a
// regular file with one link, so a symlink or a hard link planted at the
// name never makes podwire open another file.
func OpenLock(path string) (*os.File, error) {
	f, err := CreateExclusive(path, 0o600)
	if !errors.Is(err, fs.ErrExist) {
		return f, err
	}
	if f, err = os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0); err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || (ok && st.Nlink != 1) {
		f.Close()
		return nil, fmt.Errorf("lock file %q is not a regular file of one link: refusing it", path)
	}
	return f, nil
}

// WriteFileFixedTemp is WriteFile for a path that one writer at a time
// writes, such as an attachment's record (a runtime never runs two
// operations on one attachment at once). Its temporary file has the fixed
// name TempName(path), so removing what a killed writer left is one unlink
// (RemoveTemp) instead of a listing of the whole directory, which DEL would
// otherwise pay per record on the node. What is at that name (a killed
// writer's leftover, or a link planted there) is unlinked, never opened,
// and the temporary file is created with CreateExclusive.
func WriteFileFixedTemp(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, func(string) (*os.File, error) {
		if err := RemoveTemp(path); err != nil {
			return nil, err
		}
		return CreateExclusive(TempName(path), 0o600)
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

// ReadJSON decodes the JSON file at path (as WriteFile leaves it) into v;
// found is false when there is none. what names the file in errors
// ("uninstall marker").
func ReadJSON(path, what string, v any) (found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to read the %s: %w", what, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("corrupt %s %q: %w", what, path, err)
	}
	return true, nil
}
