package main

import (
	"fmt"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"

	"github.com/podwire/podwire/integration/cnitest"
)

// arm is one chain measured: ptp + host-local, then the chained plugins of
// the arm, bound to a node (its ipam, cache and state directories).
type arm struct {
	key   string // "A".."G"
	label string
	// extra builds the plugins after ptp for node n.
	extra       func(n *node) []any
	forwarding  bool              // pods in an allowed forwarding namespace
	annotations map[string]string // sent as the runtime capability
	portmap     bool              // send one port mapping per pod
	podwire     bool
	// bridge makes the primary the reference bridge plugin on cni0 (what
	// flannel's CNI plugin delegates to) instead of ptp.
	bridge bool
	subnet int // second octet of the pod IPv4 pool, also the IPv6 pool
	list   *libcni.NetworkConfigList
	node   *node
}

// podwireEntry is podwire's conflist entry on node n: source check on,
// forwarding allowed in nf-*, and the node tables (Azure probe SNAT on the
// default-route uplink, egress IPs assigned to the uplink).
func podwireEntry(n *node, extra map[string]any) map[string]any {
	e := map[string]any{
		"type":         "podwire",
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true},
		"stateDir":     n.stateDir,
		"logFile":      filepath.Join(n.dir, "podwire.log"),
		"sourceCheck":  true,
		"forwarding":   map[string]any{"namespaces": []string{"nf-*"}},
		"probeSNAT":    map[string]any{"preset": "azure"},
		"egress": map[string]any{
			"ips":         []string{egressV4, egressV6},
			"exceptCIDRs": []string{"10.0.0.0/8", "fd00::/8"},
		},
	}
	for k, v := range extra {
		e[k] = v
	}
	return e
}

// armKinds are the arms of the latency comparison (G only where the kernel
// has bridge VLAN filtering). H and I are the bridging primary's pair: I's
// added latency is against H.
var armKinds = []string{"A", "B", "C", "D", "E", "F", "G", "H", "I"}

// baseOf is the arm whose latency an arm's added latency is measured
// against: the same primary without the chained plugins.
func baseOf(kind string) string {
	if kind == "I" {
		return "H"
	}
	return "A"
}

// newArm returns arm kind bound to node n, with its conflist.
func newArm(kind string, n *node, subnet int) (*arm, error) {
	return newArmNamed(kind, n, subnet, "bench-"+kind)
}

// newArmNamed is newArm with the network name given: arms of one name on a
// node share host-local's lease directory (whose cost grows with the leases
// in it), so that A and E on a scaling node pay host-local alike.
func newArmNamed(kind string, n *node, subnet int, name string) (*arm, error) {
	a := &arm{key: kind, subnet: subnet, node: n, extra: func(*node) []any { return nil }}
	switch kind {
	case "A":
		a.label = "ptp + host-local"
	case "B":
		a.label = "A + passthrough (floor)"
		a.extra = func(*node) []any { return []any{map[string]any{"type": "passthrough"}} }
	case "C":
		a.label = "A + tuning (one sysctl)"
		a.extra = func(*node) []any {
			return []any{map[string]any{"type": "tuning", "sysctl": map[string]string{"net.core.somaxconn": "1024"}}}
		}
	case "D":
		a.label = "A + portmap (nftables, one mapping)"
		a.portmap = true
		a.extra = func(*node) []any {
			return []any{map[string]any{"type": "portmap", "backend": "nftables", "capabilities": map[string]bool{"portMappings": true}}}
		}
	case "E":
		a.label = "A + podwire, ordinary pod"
		a.podwire = true
		a.extra = func(n *node) []any { return []any{podwireEntry(n, nil)} }
	case "F":
		a.label = "A + podwire, forwarding pod"
		a.podwire, a.forwarding = true, true
		a.annotations = map[string]string{"podwire.io/forwarding": "true"}
		a.extra = func(n *node) []any { return []any{podwireEntry(n, nil)} }
	case "G":
		a.label = "A + podwire, VLAN 100 access port"
		a.podwire = true
		a.annotations = map[string]string{"podwire.io/vlan": "100"}
		a.extra = func(n *node) []any { return []any{podwireEntry(n, map[string]any{"allowedVLANs": "100"})} }
	case "H":
		a.label = "bridge + host-local (flannel's delegate)"
		a.bridge = true
	case "I":
		a.label = "H + podwire, ordinary pod (checked at the bridge)"
		a.bridge, a.podwire = true, true
		a.extra = func(n *node) []any { return []any{podwireEntry(n, nil)} }
	default:
		return nil, fmt.Errorf("unknown arm %q", kind)
	}
	var plugins []map[string]any
	for _, e := range a.extra(n) {
		plugins = append(plugins, e.(map[string]any))
	}
	ch := cnitest.Chain{
		Name: name, Version: "1.1.0", IPAMDir: filepath.Join(n.dir, "ipam"),
		V4Pool: fmt.Sprintf("10.%d.0.0/16", subnet), V6Pool: fmt.Sprintf("fd00:%d::/64", subnet),
		DefaultRoutes: true, MTU: 1500, Plugins: plugins,
	}
	if a.bridge {
		ch.PrimaryEntry = map[string]any{
			"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "hairpinMode": true, "mtu": 1500,
			"ipam": map[string]any{"type": "host-local", "dataDir": ch.IPAMDir, "ranges": []any{
				[]any{map[string]string{"subnet": ch.V4Pool}}, []any{map[string]string{"subnet": ch.V6Pool}},
			}},
		}
	}
	l, err := ch.List()
	if err != nil {
		return nil, fmt.Errorf("conflist of arm %s: %w", kind, err)
	}
	a.list = l
	return a, nil
}
