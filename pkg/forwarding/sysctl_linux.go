package forwarding

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/utils/sysctl"
)

// ErrNoSysctl is returned (wrapped) when a sysctl does not exist: its
// interface is gone.
var ErrNoSysctl = fs.ErrNotExist

// GetSysctl reads a sysctl of the calling thread's netns by its /proc/sys
// relative path; the value is trimmed.
func GetSysctl(key string) (string, error) {
	if !strings.Contains(key, ".") {
		v, err := sysctl.Sysctl(key)
		if err != nil {
			return "", fmt.Errorf("failed to read sysctl %s: %w", key, err)
		}
		return strings.TrimSpace(v), nil
	}
	// A dotted interface name: the sysctl package would turn its dot into
	// a slash.
	b, err := os.ReadFile(filepath.Join("/proc/sys", key))
	if err != nil {
		return "", fmt.Errorf("failed to read sysctl %s: %w", key, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// SetSysctl writes a sysctl of the calling thread's netns.
func SetSysctl(key, value string) error {
	var err error
	if !strings.Contains(key, ".") {
		_, err = sysctl.Sysctl(key, value)
	} else {
		err = os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644)
	}
	if err != nil {
		return fmt.Errorf("failed to set sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// IsNotExist reports whether err says a sysctl (its interface) is gone.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
