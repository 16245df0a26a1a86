package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

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
	// MultusNamespace is where Multus looks up NetworkAttachmentDefinitions
	// named by clusterNetwork (multus-cni's multusNamespace; "" is its
	// default, kube-system).
	MultusNamespace string `json:"multusNamespace"`
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
// resolves: a file, or a NetworkAttachmentDefinition's config). Otherwise
// it names what the runtime reads instead.
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
			d, err := c.multusClusterNetwork(cn, h.MultusNamespace, files)
			if err != nil {
				return fmt.Errorf("the runtime reads %s (Multus), whose clusterNetwork podwire cannot follow: %w", f, err)
			}
			if d.path == conflist || d.head.holdsPodwire() {
				return nil
			}
			return fmt.Errorf("the runtime reads %s (Multus), whose clusterNetwork %q is %s, which does not chain podwire (podwire is in %s)", f, cn, d, conflist)
		}
		return fmt.Errorf("the runtime reads %s (Multus), whose delegate does not chain podwire yet (podwire is in %s)", f, conflist)
	}
	return fmt.Errorf("the runtime reads no conflist of %s yet", c.ConfDir)
}

// clusterNet is what a Multus clusterNetwork resolves to: a configuration
// file (path, in the agent's view) or a NetworkAttachmentDefinition's
// config (nad, "namespace/name"), and its head.
type clusterNet struct {
	path, nad string
	head      confHead
}

func (d clusterNet) String() string {
	if d.nad != "" {
		return "NetworkAttachmentDefinition " + d.nad
	}
	return d.path
}

// DefaultMultusNamespace is where Multus looks up the
// NetworkAttachmentDefinition a clusterNetwork names, unless its
// configuration's multusNamespace says otherwise.
const DefaultMultusNamespace = "kube-system"

// multusClusterNetwork resolves Multus's clusterNetwork value cn as
// multus-cni's getNetDelegate does, in its order:
//   - a name: first a NetworkAttachmentDefinition of that name in
//     namespace (DefaultMultusNamespace when ""), read through
//     NetworkAttachment: its config, or, when its config is empty, the
//     configuration of the conf dir of that name; then, without such an
//     object, the configuration of ConfDir (files, in libcni's order) whose
//     "name" is cn;
//   - with a '/', a path: a directory's first configuration (libcni's
//     order, the first that parses), or the file itself. Paths are
//     Multus's: the node's (HostConfDir, /etc/cni/net.d) or the thick
//     daemon's mount of the conf dir (/host/etc/cni/net.d in Multus's
//     DaemonSet), each mapped to ConfDir (multusPath).
func (c *Chain) multusClusterNetwork(cn, namespace string, files []string) (clusterNet, error) {
	if !strings.Contains(cn, "/") {
		if c.NetworkAttachment != nil {
			if namespace == "" {
				namespace = DefaultMultusNamespace
			}
			nad := namespace + "/" + cn
			config, found, err := c.networkAttachment(namespace, cn)
			if err != nil {
				return clusterNet{}, fmt.Errorf("clusterNetwork %q: NetworkAttachmentDefinition %s: %w", cn, nad, err)
			}
			if found && strings.TrimSpace(config) != "" {
				d := clusterNet{nad: nad}
				if err := json.Unmarshal([]byte(config), &d.head); err != nil {
					return clusterNet{}, fmt.Errorf("clusterNetwork %q: NetworkAttachmentDefinition %s: its config is not a CNI configuration: %w", cn, nad, err)
				}
				return d, nil
			}
		}
		for _, f := range files {
			if h, ok := readConfHead(f); ok && h.Name == cn && !h.isMultus() {
				return clusterNet{path: f, head: h}, nil
			}
		}
		if c.NetworkAttachment == nil {
			return clusterNet{}, fmt.Errorf("clusterNetwork %q is the name of no configuration of %s (NetworkAttachmentDefinitions are not read)", cn, c.ConfDir)
		}
		return clusterNet{}, fmt.Errorf("clusterNetwork %q is the name of no NetworkAttachmentDefinition in %s and of no configuration of %s", cn, namespace, c.ConfDir)
	}
	p, ok := c.multusPath(cn)
	if !ok {
		return clusterNet{}, fmt.Errorf("clusterNetwork %q lies outside the conf dir %s", cn, c.ConfDir)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return clusterNet{}, fmt.Errorf("clusterNetwork %q: %w", cn, err)
	}
	if !fi.IsDir() {
		h, _ := readConfHead(p)
		return clusterNet{path: p, head: h}, nil
	}
	sub, err := install.ConfFiles(p)
	if err != nil {
		return clusterNet{}, fmt.Errorf("clusterNetwork %q: %w", cn, err)
	}
	for _, f := range sub {
		if h, ok := readConfHead(f); ok {
			return clusterNet{path: f, head: h}, nil
		}
	}
	return clusterNet{}, fmt.Errorf("clusterNetwork %q is a directory without a configuration", cn)
}

// nadTimeout bounds one read of a NetworkAttachmentDefinition: InUse runs
// in the agent's readiness.
const nadTimeout = 5 * time.Second

// networkAttachment reads a NetworkAttachmentDefinition through
// NetworkAttachment, within nadTimeout.
func (c *Chain) networkAttachment(namespace, name string) (config string, found bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), nadTimeout)
	defer cancel()
	return c.NetworkAttachment(ctx, namespace, name)
}

// nadResource is Multus's NetworkAttachmentDefinition (the Network
// Plumbing Working Group's multi-net-spec).
var nadResource = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// NetworkAttachments is Chain.NetworkAttachment over client: a GET of the
// object, its spec.config. No such object, or no such resource (Multus's
// CRD not installed), is found false. When the API does not answer, the
// last answer for that object stands, so that an apiserver's blip neither
// makes the node not ready nor brings the startup taint back; with none
// yet, the error. RBAC: get of network-attachment-definitions in Multus's
// namespace (the chart's multus.namespace).
func NetworkAttachments(client dynamic.Interface) func(ctx context.Context, namespace, name string) (string, bool, error) {
	var mu sync.Mutex
	last := map[string]nadAnswer{}
	return func(ctx context.Context, namespace, name string) (string, bool, error) {
		a, err := getNetworkAttachment(ctx, client, namespace, name)
		mu.Lock()
		defer mu.Unlock()
		key := namespace + "/" + name
		if err == nil {
			last[key] = a
			return a.config, a.found, nil
		}
		if l, ok := last[key]; ok && !answered(err) {
			return l.config, l.found, nil
		}
		return "", false, err
	}
}

// getNetworkAttachment is one GET of namespace/name.
func getNetworkAttachment(ctx context.Context, client dynamic.Interface, namespace, name string) (nadAnswer, error) {
	u, err := client.Resource(nadResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nadAnswer{}, nil
	}
	if err != nil {
		return nadAnswer{}, err
	}
	config, _, err := unstructured.NestedString(u.Object, "spec", "config")
	if err != nil {
		return nadAnswer{}, fmt.Errorf("spec.config: %w", err)
	}
	return nadAnswer{config: config, found: true}, nil
}

// nadAnswer is an answer of NetworkAttachments.
type nadAnswer struct {
	config string
	found  bool
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
