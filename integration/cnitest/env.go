package cnitest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// PodwireBin is the podwire binary: $PODWIRE_BIN, else bin/podwire of the
// repository (seen from a package directory under integration/).
func PodwireBin() string { return envPath("PODWIRE_BIN", "../bin/podwire") }

// CNIBinDir holds the reference plugins and cnitool: $PODWIRE_CNI_BIN,
// else .cache/cni-bin of the repository.
func CNIBinDir() string { return envPath("PODWIRE_CNI_BIN", "../.cache/cni-bin") }

// Plugins are the directories libcni searches: PodwireBin's and CNIBinDir.
func Plugins() []string { return []string{filepath.Dir(PodwireBin()), CNIBinDir()} }

// CheckPlugins reports the first of the named plugins missing from dirs.
func CheckPlugins(dirs []string, names ...string) error {
	for _, p := range names {
		found := false
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, p)); err == nil {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("plugin %s not found in %v (set PODWIRE_BIN and PODWIRE_CNI_BIN, or run `make build tools`)", p, dirs)
		}
	}
	return nil
}

func envPath(key, def string) string {
	p := os.Getenv(key)
	if p == "" {
		p = def
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return abs
}

// Run executes a command in the calling thread's netns (inside ns.Do).
func Run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// CNICode returns the CNI error code of err (libcni wraps it), or 0.
func CNICode(err error) uint {
	var te *types.Error
	if !errors.As(err, &te) {
		return 0
	}
	return te.Code
}

// Eventually retries f for up to d (for kernel state that settles: DAD).
func Eventually(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
