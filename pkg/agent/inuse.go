package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/podwire/podwire/pkg/install"
)

// The chain the runtime reads. containerd and CRI-O load the first file of
// the conf dir in libcni's order (install.ConfFiles: by name, .conf,
// .conflist and .json) that parses; podwire is in the node's chain only
// when that file is the conflist holding it, or a Multus configuration
// whose delegate is. A conflist of podwire's that sorts after another file
// (Multus's 00-multus.conf sorts before 00-podwire.conflist) is never
// read.

// multusTypes are the plugin types of Multus's generated configuration:
// the thin plugin ("multus") copies the primary's conflist into its
// "delegates"; the thick plugin's shim ("multus-shim") names it in
// "clusterNetwork" and its daemon reads that file at each ADD.
var multusTypes = []string{"multus", "multus-shim"}

// confPlugin is a plugin of a conflist, by type.
type confPlugin struct {
	Type string `json:"type"`
}

// confHead is what the agent reads of a file of the conf dir.
type confHead struct {
	Type           string            `json:"type"`
	Plugins        []confPlugin      `json:"plugins"`
	Delegates      []json.RawMessage `json:"delegates"`
	ClusterNetwork string            `json:"clusterNetwork"`
}

func (h *confHead) isMultus() bool { return slices.Contains(multusTypes, h.Type) }

// holdsPodwire reports whether a conflist (or a single plugin's conf) has
// podwire among its plugins.
func (h *confHead) holdsPodwire() bool {
	if h.Type == install.PluginType {
		return true
	}
	return slices.Contains(h.Plugins, confPlugin{Type: install.PluginType})
}

// readConfHead parses a file of the conf dir; ok is false when it does not
// parse (being written, or not a CNI configuration: libcni skips it too).
func readConfHead(path string) (h confHead, ok bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return h, false
	}
	return h, json.Unmarshal(data, &h) == nil
}

// InUse is nil when the runtime's chain holds podwire: the first parsable
// file of ConfDir in libcni's order is conflist (the file Sync keeps
// podwire in), or a Multus configuration that delegates to a chain with
// podwire (embedded delegates) or to conflist (clusterNetwork, a path or a
// file name). Otherwise it names the file the runtime reads instead.
func (c *Chain) InUse(conflist string) error {
	files, err := install.ConfFiles(c.ConfDir)
	if err != nil {
		return fmt.Errorf("failed to list CNI conf dir %q: %w", c.ConfDir, err)
	}
	for _, f := range files {
		h, ok := readConfHead(f)
		if !ok {
			continue
		}
		if f == conflist {
			return nil
		}
		if !h.isMultus() {
			return fmt.Errorf("the runtime reads %s, which sorts before %s and does not chain podwire", f, conflist)
		}
		for _, d := range h.Delegates {
			var dh confHead
			if json.Unmarshal(d, &dh) == nil && dh.holdsPodwire() {
				return nil
			}
		}
		if cn := h.ClusterNetwork; cn != "" && (filepath.Base(cn) == filepath.Base(conflist) || cn == c.nodePath(conflist)) {
			return nil
		}
		return fmt.Errorf("the runtime reads %s (Multus), whose delegate does not chain podwire yet (podwire is in %s)", f, conflist)
	}
	return fmt.Errorf("the runtime reads no conflist of %s yet", c.ConfDir)
}
