package vm

import (
	"fmt"
	"testing"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
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

	err := node.Do(func(ns.NetNS) error {
		on := true
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-smoke"}, VlanFiltering: &on}
		if err := netlink.LinkAdd(br); err != nil {
			return fmt.Errorf("failed to add bridge %q: %w", br.Name, err)
		}
		return linkUp(br.Name)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		host := "veth-" + name
		addVeth(t, node, host, pods[name], "eth0")
		addAddr(t, pods[name], "eth0", addrs[name]+"/24")
		err := node.Do(func(ns.NetNS) error {
			port, err := netlinksafe.LinkByName(host)
			if err != nil {
				return err
			}
			br, err := netlinksafe.LinkByName("br-smoke")
			if err != nil {
				return err
			}
			if err := netlink.LinkSetMaster(port, br); err != nil {
				return fmt.Errorf("failed to enslave %q: %w", host, err)
			}
			if err := netlink.BridgeVlanDel(port, 1, true, true, false, true); err != nil {
				return fmt.Errorf("failed to remove VLAN 1 from %q: %w", host, err)
			}
			if err := netlink.BridgeVlanAdd(port, vlans[name], true, true, false, true); err != nil {
				return fmt.Errorf("failed to add VLAN %d to %q: %w", vlans[name], host, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	mustPing(t, pods["a"], "same VLAN 100", addrs["b"])
	mustPing(t, pods["b"], "same VLAN 100", addrs["a"])
	mustNotPing(t, pods["a"], "VLAN 100 to VLAN 200", addrs["c"])
	mustNotPing(t, pods["c"], "VLAN 200 to VLAN 100", addrs["b"])
}
