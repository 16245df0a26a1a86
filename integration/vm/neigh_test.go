package vm

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/integration/cnitest"
)

// neighbourMAC is the link-layer address of ip in netns's neighbour table on
// ifName, or nil.
func neighbourMAC(t *testing.T, netns ns.NetNS, ifName string, ip netip.Addr) net.HardwareAddr {
	t.Helper()
	mac, err := cnitest.NeighbourMAC(netns, ifName, ip)
	if err != nil {
		t.Fatalf("neighbour table of %s: %v", ifName, err)
	}
	return mac
}

// TestVLANNeighbourLearnsReusedIP: a switch behind the uplink (the far end's
// VLAN 100 interface) that talked to pod a keeps a's MAC for a's static VLAN
// addresses after a is gone. Pod b takes the same addresses with another MAC;
// within 1 s of b's ADD the switch's entries hold b's MAC, without any
// traffic to b: podwire's announcement crossed the bridge and the uplink
// trunk, tagged.
func TestVLANNeighbourLearnsReusedIP(t *testing.T) {
	require(t, capVLANFiltering, capVLAN8021Q)
	n := newNode(t, vlanConf(nil))
	far, farIf := addFarVLAN100(t, n)
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:100::1")
	ann := map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.1/24,2001:db8:100::1/64"}

	a := n.mustAddPod(ann)
	mustPing(t, far, "switch to pod a", v4.String())
	mustPing(t, far, "switch to pod a over IPv6", v6.String())
	macA := podMAC(t, a, "net1")
	for _, ip := range []netip.Addr{v4, v6} {
		if got := neighbourMAC(t, far, farIf, ip); got.String() != macA.String() {
			t.Fatalf("switch's entry for %s is %v, want a's %s", ip, got, macA)
		}
	}
	if err := a.Del(); err != nil {
		t.Fatalf("DEL a: %v", err)
	}

	b := n.mustAddPod(ann)
	added := time.Now()
	macB := podMAC(t, b, "net1")
	if macB.String() == macA.String() {
		t.Fatalf("pods a and b have the same MAC %s: the test proves nothing", macA)
	}
	for _, ip := range []netip.Addr{v4, v6} {
		var got net.HardwareAddr
		for {
			got = neighbourMAC(t, far, farIf, ip)
			if got.String() == macB.String() || time.Since(added) > time.Second {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got.String() != macB.String() {
			t.Errorf("1 s after b's ADD the switch's entry for the reused %s is %s, want b's %s\nlog:\n%s", ip, got, macB, n.Log())
		}
	}
	if !t.Failed() {
		t.Logf("the switch holds b's MAC for %s and %s %s after ADD", v4, v6, time.Since(added).Round(time.Millisecond))
	}
}
