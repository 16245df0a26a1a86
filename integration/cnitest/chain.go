package cnitest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
)

// Chain is a conflist: ptp with host-local as the primary, then the chained
// entries (podwire, tuning, ...), as a node's runtime reads it.
type Chain struct {
	Name    string // network name
	Version string // cniVersion
	// IPAMDir is host-local's dataDir (its leases).
	IPAMDir string
	// V4Pool and V6Pool are host-local's subnets; "" leaves a family out.
	V4Pool, V6Pool string
	// DefaultRoutes gives pods default routes (0.0.0.0/0 and ::/0) via ptp.
	DefaultRoutes bool
	// MTU is ptp's mtu (0: the key is left out).
	MTU int
	// IPMasq turns on ptp's ipMasq (a primary plugin's masquerade at
	// srcnat).
	IPMasq bool
	// PrimaryEntry, when set, replaces ptp (with its IPAM) as the first
	// plugin, e.g. the reference bridge plugin; the fields above are then
	// unused.
	PrimaryEntry map[string]any
	// Plugins are the entries after the primary.
	Plugins []map[string]any
}

// Primary is the first plugin's entry: PrimaryEntry, else ptp with
// host-local.
func (c Chain) Primary() map[string]any {
	if c.PrimaryEntry != nil {
		return c.PrimaryEntry
	}
	var ranges []any
	for _, p := range []string{c.V4Pool, c.V6Pool} {
		if p != "" {
			ranges = append(ranges, []any{map[string]string{"subnet": p}})
		}
	}
	ipam := map[string]any{"type": "host-local", "dataDir": c.IPAMDir, "ranges": ranges}
	if c.DefaultRoutes {
		var routes []any
		if c.V4Pool != "" {
			routes = append(routes, map[string]string{"dst": "0.0.0.0/0"})
		}
		if c.V6Pool != "" {
			routes = append(routes, map[string]string{"dst": "::/0"})
		}
		ipam["routes"] = routes
	}
	ptp := map[string]any{"type": "ptp", "ipam": ipam}
	if c.MTU != 0 {
		ptp["mtu"] = c.MTU
	}
	if c.IPMasq {
		ptp["ipMasq"] = true
	}
	return ptp
}

// Bytes is the conflist as JSON.
func (c Chain) Bytes() ([]byte, error) {
	plugins := []any{c.Primary()}
	for _, p := range c.Plugins {
		plugins = append(plugins, p)
	}
	return json.Marshal(map[string]any{"cniVersion": c.Version, "name": c.Name, "plugins": plugins})
}

// List is the conflist parsed by libcni.
func (c Chain) List() (*libcni.NetworkConfigList, error) {
	b, err := c.Bytes()
	if err != nil {
		return nil, err
	}
	l, err := libcni.ConfListFromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("conflist %s: %w", c.Name, err)
	}
	return l, nil
}

// PodwireEntry is podwire's conflist entry with the runtime capability for
// annotations, the given state dir and log file, claims checked on the node
// (claimScope "node": these nodes have no API for the cluster's), then extra
// keys.
func PodwireEntry(stateDir, logFile string, extra map[string]any) map[string]any {
	e := map[string]any{
		"type":         "podwire",
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true},
		"stateDir":     stateDir,
		"logFile":      logFile,
		"claimScope":   "node",
	}
	for k, v := range extra {
		e[k] = v
	}
	return e
}

// PodArgs is what a CRI runtime sends for a pod sandbox.
type PodArgs struct {
	Namespace string // Kubernetes namespace; default "default"
	Name      string // default pod-<random>
	UID       string // default random
	// Annotations are sent as the runtime capability; nil sends null (a
	// pod without annotations, as containerd does).
	Annotations map[string]string
	// NoCapability leaves the annotations capability out, as an old
	// runtime would.
	NoCapability bool
	// Capabilities are further capability args (portMappings, ...).
	Capabilities map[string]any
}

// RuntimeConf is the runtime config for a pod whose netns is at netnsPath
// (may be ""), with a fresh container ID and eth0.
func (a PodArgs) RuntimeConf(netnsPath string) *libcni.RuntimeConf {
	namespace, name, uid := a.Namespace, a.Name, a.UID
	if namespace == "" {
		namespace = "default"
	}
	if name == "" {
		name = "pod-" + RandHex(4)
	}
	if uid == "" {
		uid = RandHex(8)
	}
	rt := &libcni.RuntimeConf{
		ContainerID: RandHex(32),
		NetNS:       netnsPath,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", namespace},
			{"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", "x"},
			{"K8S_POD_UID", uid},
		},
		CapabilityArgs: map[string]any{},
	}
	if !a.NoCapability {
		var ann any
		if a.Annotations != nil {
			ann = a.Annotations
		}
		rt.CapabilityArgs["io.kubernetes.cri.pod-annotations"] = ann
	}
	for k, v := range a.Capabilities {
		rt.CapabilityArgs[k] = v
	}
	return rt
}

// Client runs libcni's verbs inside a node netns, as the node's runtime
// does. Safe for concurrent use.
type Client struct {
	NS  ns.NetNS
	CNI *libcni.CNIConfig
}

// NewClient is a client for the node netns n, finding plugins in binDirs
// and keeping libcni's cache in cacheDir.
func NewClient(n ns.NetNS, binDirs []string, cacheDir string) *Client {
	return &Client{NS: n, CNI: libcni.NewCNIConfigWithCacheDir(binDirs, cacheDir, nil)}
}

// Add runs ADD through list.
func (c *Client) Add(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (types.Result, error) {
	var res types.Result
	err := c.NS.Do(func(ns.NetNS) error {
		var err error
		res, err = c.CNI.AddNetworkList(context.Background(), list, rt)
		return err
	})
	return res, err
}

// Del runs DEL through list (libcni sends the cached prevResult; a second
// DEL finds no cache and sends none).
func (c *Client) Del(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return c.NS.Do(func(ns.NetNS) error {
		return c.CNI.DelNetworkList(context.Background(), list, rt)
	})
}

// Check runs CHECK through list.
func (c *Client) Check(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return c.NS.Do(func(ns.NetNS) error {
		return c.CNI.CheckNetworkList(context.Background(), list, rt)
	})
}

// GC runs GC through list with the given valid attachments.
func (c *Client) GC(list *libcni.NetworkConfigList, valid ...*libcni.RuntimeConf) error {
	args := &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}
	for _, rt := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: rt.ContainerID, IfName: rt.IfName})
	}
	return c.NS.Do(func(ns.NetNS) error {
		return c.CNI.GCNetworkList(context.Background(), list, args)
	})
}

// Status runs STATUS through list.
func (c *Client) Status(list *libcni.NetworkConfigList) error {
	return c.NS.Do(func(ns.NetNS) error {
		return c.CNI.GetStatusNetworkList(context.Background(), list)
	})
}

// Attach runs ADD and converts the result to the current type. On a
// failed ADD it runs DEL, as a runtime does, so that ptp and host-local
// release what they made; the ADD's error is returned.
func (c *Client) Attach(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (*current.Result, string, error) {
	res, err := c.Add(list, rt)
	if err != nil {
		_ = c.Del(list, rt)
		return nil, "", err
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return nil, "", fmt.Errorf("result of ADD %s: %w", list.Name, err)
	}
	return r, res.Version(), nil
}

// RandHex is nbytes of random data in hex.
func RandHex(nbytes int) string {
	b := make([]byte, nbytes)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
