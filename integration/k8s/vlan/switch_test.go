package vlan

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/internal/testns"
)

// The trunk: each node's second NIC (uplinks[i] on node i) is a veth
// into the switch netns, whose VLAN-filtering bridge sw0 carries
// trunkVLANs tagged on those ports and nothing untagged. The client, a
// netns outside the nodes, hangs off an access port of VLAN 100.

// uplinks are the nodes' trunk NICs, named as on mixed hardware; the
// chart's config.uplink lists both, and each node uses the one it has.
var uplinks = []string{"eth1", "ens4"}

// trunkVLANs are the VLANs the switch trunks to the nodes; vlanList is
// vlanGrants' form of them.
var trunkVLANs = []uint16{100, 200}

func vlanList() string { return "100,200" }

// Addresses on the VLANs, inside the run's namespaces only. vlanSubnet and
// vlan200Subnet are the grant's subnets (TestTrunkRouter routes between
// them); the client holds clientIP on VLAN 100; gatewayIP is the VLAN's
// router outside the cluster. The grant excludes both.
var (
	vlanSubnet    = netip.MustParsePrefix("192.0.2.0/24")
	vlan200Subnet = netip.MustParsePrefix("198.51.100.0/24")
	clientIP      = netip.MustParseAddr("192.0.2.100")
	gatewayIP     = netip.MustParseAddr("192.0.2.1")
)

var (
	switchNS ns.NetNS // the trunk's switch
	clientNS ns.NetNS // the client on VLAN 100's access port
)

// makeTrunk makes the switch, plugs every node's uplink and the client
// into it, and gives the client clientIP.
func makeTrunk() error {
	var err error
	if switchNS, err = testns.Make(); err != nil {
		return err
	}
	if clientNS, err = testns.Make(); err != nil {
		return err
	}
	on := true
	if err := switchNS.Do(func(ns.NetNS) error {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "sw0"}, VlanFiltering: &on}
		if err := netlink.LinkAdd(br); err != nil {
			return fmt.Errorf("failed to add the trunk's bridge: %w", err)
		}
		return netlink.LinkSetUp(br)
	}); err != nil {
		return err
	}
	for i, n := range c.Nodes {
		if err := plug(fmt.Sprintf("swp%d", i+1), n.NetNS, uplinks[i], false, trunkVLANs...); err != nil {
			return err
		}
	}
	if err := plug("swc", clientNS.Path(), "eth0", true, 100); err != nil {
		return err
	}
	return clientNS.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: clientIP.AsSlice(), Mask: net.CIDRMask(vlanSubnet.Bits(), 32)}})
	})
}

// releaseTrunk removes the switch and the client: their veths go with
// them, the nodes' uplinks too.
func releaseTrunk() {
	testns.Release(clientNS)
	testns.Release(switchNS)
}

// plug makes a veth from port on sw0 to name in the netns at peerNS, both
// up. The port carries vids tagged (access: the one vid untagged, its
// PVID) and not the bridge's default PVID 1.
func plug(port, peerNS, name string, access bool, vids ...uint16) error {
	peer, err := ns.GetNS(peerNS)
	if err != nil {
		return err
	}
	defer peer.Close()
	if err := switchNS.Do(func(ns.NetNS) error {
		br, err := netlinksafe.LinkByName("sw0")
		if err != nil {
			return err
		}
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: port, MasterIndex: br.Attrs().Index}, PeerName: name,
			PeerNamespace: netlink.NsFd(int(peer.Fd()))}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("failed to add the switch port %s (%s): %w", port, name, err)
		}
		l, err := netlinksafe.LinkByName(port)
		if err != nil {
			return err
		}
		if err := netlink.BridgeVlanDel(l, 1, true, true, false, true); err != nil {
			return fmt.Errorf("failed to take VLAN 1 off %s: %w", port, err)
		}
		for _, vid := range vids {
			if err := netlink.BridgeVlanAdd(l, vid, access, access, false, true); err != nil {
				return fmt.Errorf("failed to add VLAN %d to %s: %w", vid, port, err)
			}
		}
		return netlink.LinkSetUp(l)
	}); err != nil {
		return err
	}
	return peer.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(name)
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	})
}
