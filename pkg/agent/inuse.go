package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
	Name           string            `json:"name"`
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
// podwire (embedded delegates, or the clusterNetwork multusClusterNetwork
// resolves). Otherwise it names the file the runtime reads instead.
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
		if cn := h.ClusterNetwork; cn != "" {
			d, err := c.multusClusterNetwork(cn, files)
			if err != nil {
				return fmt.Errorf("the runtime reads %s (Multus), whose clusterNetwork podwire cannot follow: %w", f, err)
			}
			if dh, ok := readConfHead(d); d == conflist || ok && dh.holdsPodwire() {
				return nil
			}
			return fmt.Errorf("the runtime reads %s (Multus), whose clusterNetwork %q is %s, which does not chain podwire (podwire is in %s)", f, cn, d, conflist)
		}
		return fmt.Errorf("the runtime reads %s (Multus), whose delegate does not chain podwire yet (podwire is in %s)", f, conflist)
	}
	return fmt.Errorf("the runtime reads no conflist of %s yet", c.ConfDir)
}

// multusClusterNetwork is the file of the conf dir (in the agent's view,
// under ConfDir) that Multus runs as the cluster network for its
// clusterNetwork value cn, as multus-cni's getNetDelegate resolves it:
//   - with a '/', a path: a directory's first configuration (libcni's
//     order, the first that parses), or the file itself. Paths are
//     Multus's: the node's (HostConfDir, /etc/cni/net.d) or the thick
//     daemon's mount of the conf dir (/host/etc/cni/net.d in Multus's
//     DaemonSet), each mapped to ConfDir (multusPath);
//   - else a name: Multus first looks for a NetworkAttachmentDefinition
//     of that name in its namespace, then for the configuration of its
//     confDir whose "name" it is. The agent reads no
//     NetworkAttachmentDefinition: it takes the configuration of ConfDir
//     (files, in libcni's order) of that name, and a
//     NetworkAttachmentDefinition of the same name, which Multus would
//     prefer, goes unseen.
func (c *Chain) multusClusterNetwork(cn string, files []string) (string, error) {
	if !strings.Contains(cn, "/") {
		for _, f := range files {
			if h, ok := readConfHead(f); ok && h.Name == cn && !h.isMultus() {
				return f, nil
			}
		}
		return "", fmt.Errorf("clusterNetwork %q is the name of no configuration of %s (a NetworkAttachmentDefinition of that name is not read)", cn, c.ConfDir)
	}
	p, ok := c.multusPath(cn)
	if !ok {
		return "", fmt.Errorf("clusterNetwork %q lies outside the conf dir %s", cn, c.ConfDir)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("clusterNetwork %q: %w", cn, err)
	}
	if !fi.IsDir() {
		return p, nil
	}
	sub, err := install.ConfFiles(p)
	if err != nil {
		return "", fmt.Errorf("clusterNetwork %q: %w", cn, err)
	}
	for _, f := range sub {
		if _, ok := readConfHead(f); ok {
			return f, nil
		}
	}
	return "", fmt.Errorf("clusterNetwork %q is a directory without a configuration", cn)
}

// multusPath maps p, a path in Multus's configuration, to the agent's view
// of the conf dir: p under the node's conf dir (HostConfDir, else ConfDir;
// and /etc/cni/net.d, the default) or under the thick daemon's mount of it
// (the same with /host before it) becomes the same path under ConfDir.
func (c *Chain) multusPath(p string) (string, bool) {
	node := c.HostConfDir
	if node == "" {
		node = c.ConfDir
	}
	for _, dir := range []string{c.ConfDir, node, "/host" + node, "/etc/cni/net.d", "/host/etc/cni/net.d"} {
		if rel, err := filepath.Rel(dir, filepath.Clean(p)); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return filepath.Join(c.ConfDir, rel), true
		}
	}
	return "", false
}
