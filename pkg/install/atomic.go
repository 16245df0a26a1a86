package install

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/podwire/podwire/pkg/atomicfile"
)

// BackupSuffix is appended to a file's name for the copy of its previous
// content. libcni loads only .conf, .conflist and .json files, so a backup
// in the CNI conf dir is never taken for a network.
const BackupSuffix = ".bak"

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
		fi, err := os.Stat(path)
		if err != nil {
			return "", fmt.Errorf("failed to stat %q: %w", path, err)
		}
		// The backup holds what the original holds: it gets its mode (a
		// 0600 conflist may name credentials), also over an older backup.
		backup = path + BackupSuffix
		if err := atomicfile.WriteFile(backup, old, fi.Mode().Perm()); err != nil {
			return "", fmt.Errorf("failed to back up %q: %w", path, err)
		}
		if err := os.Chmod(backup, fi.Mode().Perm()); err != nil {
			return "", fmt.Errorf("failed to set the mode of %q: %w", backup, err)
		}
	}
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
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
	if err := atomicfile.WriteFile(dst, data, 0o755); err != nil {
		return false, err
	}
	// atomicfile.WriteFile keeps the mode of a file it replaces; a binary
	// must run.
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
