package nodetables

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/podwire/podwire/pkg/atomicfile"
)

// clusterName is the cluster's own ranges in stateDir, written by the node
// agent (WriteCluster). Not "*.json": the state store reads every *.json
// file there as an attachment record.
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
}

// Prefixes is c's pod CIDRs then node IPs.
func (c *Cluster) Prefixes() []netip.Prefix {
	if c == nil {
		return nil
	}
	return append(slices.Clone(c.PodCIDRs), c.NodeIPs...)
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
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return false, fmt.Errorf("failed to create state dir %q: %w", stateDir, err)
	}
	if err := atomicfile.RemoveTemps(path); err != nil {
		return false, fmt.Errorf("failed to write the cluster's CIDRs: %w", err)
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return false, fmt.Errorf("failed to write the cluster's CIDRs: %w", err)
	}
	return true, nil
}

// readCluster returns the cluster's ranges the agent wrote, or nil when it
// has written none (no agent, or not synced yet).
func readCluster(stateDir string) (*Cluster, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, clusterName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read the cluster's CIDRs: %w", err)
	}
	c := &Cluster{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("corrupt cluster CIDRs file %q: %w", filepath.Join(stateDir, clusterName), err)
	}
	return c, nil
}
