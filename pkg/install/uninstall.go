package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/podwire/podwire/pkg/atomicfile"
	"github.com/podwire/podwire/pkg/config"
)

// UninstalledName is the uninstall marker in stateDir. The node agent
// writes it, under the node lock, when its stop is an uninstall (its
// DaemonSet is gone) and it has taken podwire out of the chain; the
// plugin's DEL and GC then remove podwire's node resources and the plugin
// binary once the last attachment is gone (FinishUninstall). A new agent
// removes it, under the same lock, before it installs the binary
// (ClearUninstalled), so a re-install racing the last DEL keeps its binary.
const UninstalledName = "uninstalled"

// MarkUninstalled writes the uninstall marker into stateDir with the time
// and the reason, for whoever finds it. The caller holds the node lock.
func MarkUninstalled(stateDir, reason string) error {
	data, err := json.Marshal(struct {
		Time   time.Time `json:"time"`
		Reason string    `json:"reason"`
	}{time.Now().UTC(), reason})
	if err != nil {
		return err
	}
	path := filepath.Join(stateDir, UninstalledName)
	if err := atomicfile.WriteFile(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("failed to write the uninstall marker %q: %w", path, err)
	}
	return nil
}

// Uninstalled reports whether stateDir holds the uninstall marker (one
// stat: DEL asks it every time, without the node lock; FinishUninstall asks
// again under it).
func Uninstalled(stateDir string) bool {
	_, err := os.Lstat(filepath.Join(stateDir, UninstalledName))
	return err == nil
}

// ClearUninstalled removes the uninstall marker from stateDir and reports
// whether it was there. The caller holds the node lock.
func ClearUninstalled(stateDir string) (bool, error) {
	path := filepath.Join(stateDir, UninstalledName)
	err := os.Remove(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("failed to remove the uninstall marker %q: %w", path, err)
	}
}

// ParseEntry runs a podwire entry (nil: an empty one) through config.Parse,
// as a runtime would hand it over, and returns the defaulted config: what
// the node resources of that entry are named (stateDir, bridge, uplink).
// A "type" other than PluginType is an error.
func ParseEntry(entry []byte) (*config.NetConf, error) {
	m := map[string]any{}
	if entry != nil {
		if err := json.Unmarshal(entry, &m); err != nil {
			return nil, fmt.Errorf("invalid podwire config: want a JSON object: %w", err)
		}
	}
	if t, ok := m["type"]; ok && t != PluginType {
		return nil, fmt.Errorf("invalid podwire config: \"type\" is %v, want %q", t, PluginType)
	}
	m["type"], m["cniVersion"], m["name"] = PluginType, "1.0.0", "podwire-install"
	stdin, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	conf, err := config.Parse(stdin)
	if err != nil {
		return nil, fmt.Errorf("invalid podwire config: %w", err)
	}
	return conf, nil
}
