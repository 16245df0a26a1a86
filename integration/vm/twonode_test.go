package vm

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/packets"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// Two nodes of one cluster, one podwire config: their trunk NICs are named
// differently (eth1 on node A, ens5 on node B, as a cluster of mixed
// hardware names them), so the config's uplink is the candidate list
// "eth1,ens5", and each node's podwire picks the one it has. The NICs are
// veths into a switch netns whose VLAN-filtering bridge carries the VLANs
// as a trunk between its two ports.

// twoNodeVLANs are the VLANs the switch trunks between the nodes.
var twoNodeVLANs = []uint16{100, 200}

// newSwitch makes the switch netns: bridge sw0 with VLAN filtering, and per
// entry of nics a veth from the node's NIC (named as the value) to a switch
// port that carries twoNodeVLANs tagged and nothing untagged.
func newSwitch(t *testing.T, nics map[*node]string) ns.NetNS {
	t.Helper()
	sw := newNS(t)
	addVLANBridge(t, sw, "sw0")
	i := 0
	for n, nic := range nics {
		port := fmt.Sprintf("swp%d", i)
		i++
		addVeth(t, n.NS, nic, sw, port)
		// A trunk: no untagged VLAN (the bridge's default PVID 1), the
		// pods' VLANs tagged.
		addBridgePort(t, sw, port, "sw0", false, twoNodeVLANs...)
	}
	return sw
}

// taggedOn is the tagged VLAN membership of the port name in n; nil when
// the link is not a bridge port.
func taggedOn(t *testing.T, n *node, name string) []uint16 {
	t.Helper()
	var v vlanbridge.PortVLANs
	n.Do(func() error {
		l, err := netlinksafe.LinkByName(name)
		if err != nil {
			return err
		}
		v, err = vlanbridge.ListPortVLANs(l.Attrs().Index)
		return err
	})
	return v.Tagged
}

// TestTwoNodesOneConfig: VLAN pods on two nodes whose uplinks are named
// differently talk across the switch on their VLAN, and a pod on another
// VLAN (same subnet) reaches none of them; each node recorded the uplink it
// chose, so CHECK and DEL use it even after a link named like an earlier
// candidate appears.
func TestTwoNodesOneConfig(t *testing.T) {
	require(t, capVLANFiltering)
	conf := vlanConf(map[string]any{"uplink": "eth1,ens5"})
	a, b := newNode(t, conf), newNode(t, conf)
	newSwitch(t, map[*node]string{a: "eth1", b: "ens5"})

	vlan := func(vid, cidr string) map[string]string {
		return map[string]string{"podwire.io/vlan": vid, "podwire.io/vlan-ips": cidr}
	}
	a100 := a.mustAddPod(vlan("100", "192.0.2.1/24"))
	a200 := a.mustAddPod(vlan("200", "192.0.2.3/24"))
	b100 := b.mustAddPod(vlan("100", "192.0.2.2/24"))
	b200 := b.mustAddPod(vlan("200", "192.0.2.4/24"))

	mustPing(t, a100.NS, "VLAN 100 from node A (eth1) to node B (ens5)", "192.0.2.2")
	mustPing(t, b100.NS, "VLAN 100 from node B (ens5) to node A (eth1)", "192.0.2.1")
	mustPing(t, a200.NS, "VLAN 200 from node A to node B", "192.0.2.4")
	mustNotPing(t, a200.NS, "VLAN 200 on node A to VLAN 100 on node B", "192.0.2.2")
	mustNotPing(t, b200.NS, "VLAN 200 on node B to VLAN 100 on node A", "192.0.2.1")
	mustNotPing(t, b100.NS, "VLAN 100 on node B to VLAN 200 on node A", "192.0.2.3")

	if got := taggedOn(t, a, "eth1"); !slices.Equal(got, twoNodeVLANs) {
		t.Errorf("node A's uplink eth1 carries %v, want %v", got, twoNodeVLANs)
	}
	if got := taggedOn(t, b, "ens5"); !slices.Equal(got, twoNodeVLANs) {
		t.Errorf("node B's uplink ens5 carries %v, want %v", got, twoNodeVLANs)
	}

	// Node B gains a link named like the first candidate: what B's pods
	// were wired with is in their records, so CHECK still finds their
	// VLANs on ens5 and DEL takes them off ens5, not off the newcomer.
	b.Do(func() error { return netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "eth1"}}) })
	for name, p := range map[string]*cnitest.Pod{"a100": a100, "a200": a200, "b100": b100, "b200": b200} {
		if err := p.CheckLast(); err != nil {
			t.Errorf("CHECK of pod %s: %v", name, err)
		}
	}
	for _, p := range []*cnitest.Pod{b100, b200, a100, a200} {
		if err := p.Del(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	if got := taggedOn(t, b, "ens5"); len(got) != 0 {
		t.Errorf("node B's uplink ens5 still carries %v after its pods left", got)
	}
	if got := taggedOn(t, a, "eth1"); len(got) != 0 {
		t.Errorf("node A's uplink eth1 still carries %v after its pods left", got)
	}
	for name, n := range map[string]*node{"A": a, "B": b} {
		if left := n.leftovers(); len(left) > 0 {
			t.Errorf("node %s: left behind after DEL: %v", name, left)
		}
	}
}

// TestTwoNodesNoUplinkCandidate: on a node of the same cluster whose NIC
// is named as no candidate of the config, a VLAN pod's ADD fails with CNI
// error 7 naming every candidate it looked for, and leaves nothing; an
// ordinary pod's ADD there works, and the node reaches it.
func TestTwoNodesNoUplinkCandidate(t *testing.T) {
	require(t, capVLANFiltering)
	conf := vlanConf(map[string]any{"uplink": "eth1,ens5"})
	a, c := newNode(t, conf), newNode(t, conf)
	newSwitch(t, map[*node]string{a: "eth1", c: "enp1s0"})

	_, err := c.addPod(map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.5/24"})
	if err == nil {
		t.Fatal("the VLAN pod's ADD on the node without any uplink candidate succeeded")
	}
	if code := cniCode(err); code != 7 {
		t.Errorf("ADD error %v: CNI code %d, want 7 (invalid network config)", err, code)
	}
	for _, want := range []string{"no uplink on node", `"eth1", "ens5"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ADD error %q does not name %s", err, want)
		}
	}
	if left := c.leftovers(); len(left) > 0 {
		t.Errorf("left behind by the failed VLAN ADD: %v", left)
	}
	c.Do(func() error {
		if _, err := netlinksafe.LinkByName("podwire0"); err == nil {
			t.Errorf("the failed VLAN ADD made the bridge podwire0")
		}
		return nil
	})

	plain := c.mustAddPod(nil)
	v4, _ := plain.Addrs()
	mustPing(t, c.NS, "the node without an uplink to its ordinary pod", v4.String())
	if err := plain.CheckLast(); err != nil {
		t.Errorf("CHECK of the ordinary pod: %v", err)
	}

	// The same config works on the node that has a candidate.
	ok := a.mustAddPod(map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.1/24"})
	if err := ok.CheckLast(); err != nil {
		t.Errorf("CHECK of the VLAN pod on node A: %v", err)
	}
}

// TestVLANAddressNodeScope is the control of the kubelet suite's
// TestVLANAddressClaimAcrossNodes (integration/k8s/vlan): with claimScope
// "node", as on these agentless nodes, each node checks a vlan-ips
// address against its own records only, so a pod on node B is wired with
// the address a pod on node A holds on the same VLAN, and both claim it
// across the switch (a third pod sees ARP for it from both MACs): the
// duplicate that the cluster-wide claim (claimScope "cluster", through the
// agents' ClaimPools) refuses.
func TestVLANAddressNodeScope(t *testing.T) {
	require(t, capVLANFiltering)
	conf := vlanConf(map[string]any{"uplink": "eth1,ens5"})
	a, b := newNode(t, conf), newNode(t, conf)
	newSwitch(t, map[*node]string{a: "eth1", b: "ens5"})
	held := map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.1/24"}
	pa := a.mustAddPod(held)
	pb, err := b.addPod(held)
	if err != nil {
		t.Fatalf("ADD on node B of the address node A's pod holds, claimScope node: %v (the control needs it wired)", err)
	}
	watcher := b.mustAddPod(map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.9/24"})
	seen := capturePackets(t, watcher.NS, "net1")
	addr := netip.MustParseAddr("192.0.2.1")
	for name, p := range map[string]*cnitest.Pod{"A": pa, "B": pb} {
		if err := packets.SendGratuitousARP(p.NS.Path(), "net1", addr); err != nil {
			t.Fatal(err)
		}
		mac := podMAC(t, p, "net1")
		mustSee(t, seen, fmt.Sprintf("node %s's pod's ARP for %s from %s", name, addr, mac), func(f []byte) bool {
			return packets.IsARPFrom(addr)(f) && bytes.Equal(f[22:28], mac)
		})
	}
}
