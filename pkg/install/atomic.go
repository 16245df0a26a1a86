package install

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// BackupSuffix is appended to a file's name for the copy of its previous
// content. libcni loads only .conf, .conflist and .json files, so a backup
// in the CNI conf dir is never taken for a network.
const BackupSuffix = ".bak"

// writeFileAtomic replaces path with data so that a reader (a runtime
// loading its conf dir, a node starting a pod) sees either the old or the
// new content, never a partial file: the data goes to a temporary file in
// the same directory, is synced, and is renamed over path; the directory is
// synced after. An existing file's mode and owner are kept; a new file gets
// perm. The temporary name ends in ".tmp", which libcni does not load.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
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
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
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
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
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

// replaceWithBackup writes data to path atomically after saving the current
// content of path to path+BackupSuffix (also atomically). It returns the
// backup's path, or "" when path did not exist.
func replaceWithBackup(path string, data []byte) (string, error) {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("failed to read %q: %w", path, err)
	}
	backup := ""
	if err == nil {
		backup = path + BackupSuffix
		if err := writeFileAtomic(backup, old, 0o644); err != nil {
			return "", fmt.Errorf("failed to back up %q: %w", path, err)
		}
	}
	if err := writeFileAtomic(path, data, 0o644); err != nil {
		return "", err
	}
	return backup, nil
}

// copyBinary installs the executable src as dst atomically with mode 0755
// (a running plugin keeps its old inode). changed is false when dst is src
// itself or already has the same content.
func copyBinary(src, dst string) (changed bool, err error) {
	sfi, err := os.Stat(src)
	if err != nil {
		return false, fmt.Errorf("failed to stat binary %q: %w", src, err)
	}
	if dfi, err := os.Stat(dst); err == nil {
		if os.SameFile(sfi, dfi) {
			return false, nil
		}
		if dfi.Size() == sfi.Size() && dfi.Mode().Perm()&0o111 != 0 {
			same, err := sameContent(src, dst)
			if err != nil {
				return false, err
			}
			if same {
				return false, nil
			}
		}
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return false, fmt.Errorf("failed to read binary %q: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return false, fmt.Errorf("failed to create bin dir %q: %w", filepath.Dir(dst), err)
	}
	if err := writeFileAtomic(dst, data, 0o755); err != nil {
		return false, err
	}
	// writeFileAtomic kept the mode of a file it replaced; a binary must run.
	if err := os.Chmod(dst, 0o755); err != nil {
		return false, fmt.Errorf("failed to make %q executable: %w", dst, err)
	}
	return true, nil
}

// sameContent compares two files byte by byte.
func sameContent(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, fmt.Errorf("failed to open %q: %w", a, err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, fmt.Errorf("failed to open %q: %w", b, err)
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if ea == io.EOF || ea == io.ErrUnexpectedEOF {
			return eb == io.EOF || eb == io.ErrUnexpectedEOF, nil
		}
		if ea != nil {
			return false, fmt.Errorf("failed to read %q: %w", a, ea)
		}
		if eb != nil {
			return false, fmt.Errorf("failed to read %q: %w", b, eb)
		}
	}
}
