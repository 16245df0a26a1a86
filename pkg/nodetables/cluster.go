package nodetables

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
)

// clusterName is the cluster's own ranges in stateDir, written by the node
// agent (WriteCluster).
const clusterName = "cluster-cidrs.cache"

// Cluster is what the egress table excepts besides egress.exceptCIDRs,
// read by the node agent from every Node of the cluster: their
// spec.podCIDRs (pod-to-pod traffic across nodes, and Service traffic,
// whose destination is a backend pod once kube-proxy's DNAT ran) and their
// InternalIP addresses as host prefixes (hostNetwork backends such as the
// apiserver, NodePorts of other nodes).
type Cluster struct {
	// Nodes is the number of Nodes read.
	Nodes int `json:"nodes"`
	// PodCIDRs and NodeIPs are sorted and without repeats.
	PodCIDRs []netip.Prefix `json:"podCIDRs,omitempty"`
	NodeIPs  []netip.Prefix `json:"nodeIPs,omitempty"`
	// Routes are the prefixes that forwarding pods serve on any node
	// (each Node's podwire.io/routes, published by its agent): networks
	// of the cluster, whose traffic keeps pod sources like pod CIDRs.
	Routes []netip.Prefix `json:"routes,omitempty"`
}

// Prefixes is c's pod CIDRs, node IPs and forwarded routes.
func (c *Cluster) Prefixes() []netip.Prefix {
	if c == nil {
		return nil
	}
	return slices.Concat(c.PodCIDRs, c.NodeIPs, c.Routes)
}

// WriteCluster records c in stateDir (mode 0600), where the plugin and
// `podwire repair` read it for the egress table; the node agent is its
// only writer. Unchanged content is not rewritten; changed reports whether
// the file was written.
func WriteCluster(stateDir string, c Cluster) (changed bool, err error) {
	b, err := json.Marshal(c)
	if err != nil {
		return false, err
	}
	path := filepath.Join(stateDir, clusterName)
	if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
		return false, nil
	}
	if err := writeStateFile(stateDir, clusterName, "cluster CIDRs", b); err != nil {
		return false, err
	}
	return true, nil
}

// readCluster returns the cluster's ranges the agent wrote, or nil when it
// has written none (no agent, or not synced yet).
func readCluster(stateDir string) (*Cluster, error) {
	c := &Cluster{}
	if found, err := readStateFile(stateDir, clusterName, "cluster CIDRs", c); !found {
		return nil, err
	}
	return c, nil
}

// ReadCluster returns the cluster's ranges the node agent wrote in
// stateDir, or nil when it has written none (no agent, or not synced yet);
// an error when the file cannot be read or decoded.
func ReadCluster(stateDir string) (*Cluster, error) { return readCluster(stateDir) }
