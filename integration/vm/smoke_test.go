package vm

import (
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

// TestSmokeVLANFilteringBridge proves the harness itself: a VLAN-filtering
// bridge in a node namespace separates access ports by VLAN, with real
// packets. Pods a and b are on VLAN 100, pod c on VLAN 200, all in one subnet,
// so only the bridge's VLAN filter keeps c apart.
func TestSmokeVLANFilteringBridge(t *testing.T) {
	require(t, capVLANFiltering)

	node := newNS(t)
	pods := map[string]ns.NetNS{"a": newNS(t), "b": newNS(t), "c": newNS(t)}
	vlans := map[string]uint16{"a": 100, "b": 100, "c": 200}
	addrs := map[string]string{"a": "10.100.0.1", "b": "10.100.0.2", "c": "10.100.0.3"}

	addVLANBridge(t, node, "br-smoke")
	for _, name := range []string{"a", "b", "c"} {
		host := "veth-" + name
		addVeth(t, node, host, pods[name], "eth0")
		addAddr(t, pods[name], "eth0", addrs[name]+"/24")
		addBridgePort(t, node, host, "br-smoke", true, vlans[name])
	}

	mustPing(t, pods["a"], "same VLAN 100", addrs["b"])
	mustPing(t, pods["b"], "same VLAN 100", addrs["a"])
	mustNotPing(t, pods["a"], "VLAN 100 to VLAN 200", addrs["c"])
	mustNotPing(t, pods["c"], "VLAN 200 to VLAN 100", addrs["b"])
}
