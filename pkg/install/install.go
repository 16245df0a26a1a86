package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/podwire/podwire/pkg/atomicfile"
)

// Options says what Install and Uninstall work on.
type Options struct {
	// BinDir is the CNI bin dir (e.g. /opt/cni/bin); the binary is installed
	// as BinDir/podwire. Empty leaves binaries alone.
	BinDir string
	// Binary is the podwire executable to copy; empty means the running one.
	Binary string
	// Conflist is the network's conflist (e.g. /etc/cni/net.d/10-flannel.conflist).
	Conflist string
	// Config is the podwire entry as JSON; nil keeps an existing entry or
	// adds DefaultEntry. Install only.
	Config []byte
	// Convert turns a single-plugin .conf into a conflist instead of
	// refusing it. Install only.
	Convert bool
}

// Result reports what Install or Uninstall did; a run that changed nothing
// has both Changed fields false.
type Result struct {
	Binary          string `json:"binary,omitempty"`
	BinaryChanged   bool   `json:"binaryChanged"`
	Conflist        string `json:"conflist"`
	ConflistChanged bool   `json:"conflistChanged"`
	// Backup holds the conflist's previous content (or the converted .conf).
	Backup string `json:"backup,omitempty"`
}

// Install copies the binary into the bin dir, then adds or updates the
// podwire entry of the conflist: the binary is in place before any runtime
// can read a conflist naming it. Both steps are atomic and idempotent.
func Install(o Options) (*Result, error) {
	if o.Conflist == "" {
		return nil, errors.New("no conflist given")
	}
	res := &Result{Conflist: o.Conflist}
	data, err := os.ReadFile(o.Conflist)
	if err != nil {
		return nil, fmt.Errorf("failed to read conflist %q: %w", o.Conflist, err)
	}
	// Edit in memory first so that a bad conflist or config changes nothing.
	out, changed, err := AddEntry(data, o.Config)
	var single *SingleConfError
	convertFrom := ""
	if errors.As(err, &single) && o.Convert {
		converted, cerr := ConvertConf(data)
		if cerr != nil {
			return nil, fmt.Errorf("failed to convert %q to a conflist: %w", o.Conflist, cerr)
		}
		if out, changed, err = AddEntry(converted, o.Config); err == nil {
			convertFrom = o.Conflist
			res.Conflist = strings.TrimSuffix(o.Conflist, filepath.Ext(o.Conflist)) + ".conflist"
			if res.Conflist == o.Conflist {
				convertFrom = ""
			} else if _, serr := os.Stat(res.Conflist); serr == nil {
				return nil, fmt.Errorf("refusing to convert %q: %q already exists", o.Conflist, res.Conflist)
			}
		}
	}
	if err != nil {
		if errors.As(err, &single) {
			return nil, fmt.Errorf("%q: %w", o.Conflist, err)
		}
		return nil, fmt.Errorf("failed to add %s to conflist %q: %w", PluginType, o.Conflist, err)
	}
	if o.BinDir != "" {
		src := o.Binary
		if src == "" {
			if src, err = os.Executable(); err != nil {
				return nil, fmt.Errorf("failed to find the running binary: %w", err)
			}
		}
		res.Binary = filepath.Join(o.BinDir, PluginType)
		if res.BinaryChanged, err = copyBinary(src, res.Binary); err != nil {
			return nil, err
		}
	}
	if !changed {
		return res, nil
	}
	if convertFrom != "" {
		// The new conflist first: until the .conf is moved away it sorts
		// first in the conf dir and stays the runtime's choice.
		if err := atomicfile.WriteFile(res.Conflist, out, 0o644); err != nil {
			return nil, err
		}
		res.Backup = convertFrom + BackupSuffix
		if err := os.Rename(convertFrom, res.Backup); err != nil {
			return nil, fmt.Errorf("failed to move converted %q to %q: %w", convertFrom, res.Backup, err)
		}
		res.ConflistChanged = true
		return res, atomicfile.SyncDir(filepath.Dir(convertFrom))
	}
	if res.Backup, err = replaceWithBackup(o.Conflist, out); err != nil {
		return nil, err
	}
	res.ConflistChanged = true
	return res, nil
}

// Uninstall removes the podwire entry from the conflist (with a backup),
// then the binary from the bin dir. Missing pieces are not an error: a
// second run changes nothing.
func Uninstall(o Options) (*Result, error) {
	res := &Result{Conflist: o.Conflist}
	if o.Conflist != "" {
		data, err := os.ReadFile(o.Conflist)
		switch {
		case os.IsNotExist(err):
			// Nothing to edit: the conflist is gone already.
		case err != nil:
			return nil, fmt.Errorf("failed to read conflist %q: %w", o.Conflist, err)
		default:
			out, changed, err := RemoveEntry(data)
			if err != nil {
				return nil, fmt.Errorf("failed to remove %s from conflist %q: %w", PluginType, o.Conflist, err)
			}
			if changed {
				if res.Backup, err = replaceWithBackup(o.Conflist, out); err != nil {
					return nil, err
				}
				res.ConflistChanged = true
			}
		}
	}
	if o.BinDir != "" {
		res.Binary = filepath.Join(o.BinDir, PluginType)
		err := os.Remove(res.Binary)
		switch {
		case err == nil:
			res.BinaryChanged = true
		case !os.IsNotExist(err): // not there: already uninstalled
			return nil, fmt.Errorf("failed to remove binary %q: %w", res.Binary, err)
		}
	}
	return res, nil
}
