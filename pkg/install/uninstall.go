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

// UninstalledName is the uninstall marker in stateDir (a Marker). The node
// agent writes it, under the node lock, when its stop is an uninstall (its
// DaemonSet is gone). From then on the plugin's ADD wires no pod (it passes
// the primary's result through), and the plugin's DEL or GC that leaves no
// attachment recorded takes podwire out of the chain and removes its node
// resources and the plugin binary (FinishUninstall). The entry stays until
// then because containerd tears a pod down with the chain it has at that
// moment, not the one the pod was wired with: removed earlier, podwire's
// DEL would never run for the pods it wired. A new agent removes the
// marker, under the same lock, before it installs the binary
// (ClearUninstalled), so a re-install racing the last DEL keeps its binary.
const UninstalledName = "uninstalled"

// Marker is the content of the uninstall marker.
type Marker struct {
	Time   time.Time `json:"time"`
	Reason string    `json:"reason"`
	// Conflists hold podwire's entry, and Derived is podwire's own
	// conflist (ModeDerive), as paths of the node (the plugin's view, not
	// the agent's mounts): the last DEL takes podwire out of them
	// (RemoveFromChain) before it removes the binary.
	Conflists []string `json:"conflists,omitempty"`
	Derived   string   `json:"derived,omitempty"`
}

// MarkUninstalled writes the uninstall marker m into stateDir. The caller
// holds the node lock.
func MarkUninstalled(stateDir string, m Marker) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	path := filepath.Join(stateDir, UninstalledName)
	if err := atomicfile.WriteFile(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("failed to write the uninstall marker %q: %w", path, err)
	}
	return nil
}

// ReadMarker reads the uninstall marker of stateDir; (nil, nil) when there
// is none.
func ReadMarker(stateDir string) (*Marker, error) {
	var m Marker
	if found, err := atomicfile.ReadJSON(filepath.Join(stateDir, UninstalledName), "uninstall marker", &m); !found {
		return nil, err
	}
	return &m, nil
}

// RemoveFromChain takes podwire out of the node's chain: it deletes derived
// (podwire's own conflist; "" for none) and removes podwire's entry from
// each of conflists, keeping every other plugin as it is (the primary's
// installer may have rewritten its file since podwire edited it, so the
// entry is removed rather than a backup restored). The backup of that edit
// (BackupSuffix), which holds the entry, goes too. It returns the files
// changed; missing files are not errors.
func RemoveFromChain(conflists []string, derived string) ([]string, error) {
	var changed []string
	if derived != "" {
		if err := os.Remove(derived); err == nil {
			changed = append(changed, derived)
		} else if !errors.Is(err, os.ErrNotExist) {
			return changed, fmt.Errorf("failed to remove derived conflist %q: %w", derived, err)
		}
	}
	for _, f := range conflists {
		if f == derived {
			continue
		}
		res, err := Uninstall(Options{Conflist: f})
		if err != nil {
			return changed, err
		}
		if res.ConflistChanged {
			changed = append(changed, f)
		}
		bak := f + BackupSuffix
		if data, err := os.ReadFile(bak); err == nil {
			if _, ok, _ := Entry(data); ok {
				if err := os.Remove(bak); err != nil {
					return changed, fmt.Errorf("failed to remove backup %q: %w", bak, err)
				}
				changed = append(changed, bak)
			}
		}
	}
	return changed, nil
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
