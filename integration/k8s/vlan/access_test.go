package vlan

import (
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/podwire/podwire/integration/packets"
)

// TestAccessPorts: pods on access ports of VLAN 100 on the two nodes reach
// each other and the client across the switch; a pod of the same subnet
// on VLAN 200 reaches none of them. The VLAN 100 exchanges are the
// control: the same addresses, one VLAN apart.
func TestAccessPorts(t *testing.T) {
	suite.Need(t)
	ensureNamespace(t, vlanNS)
	a1, b1, a2 := netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12"), netip.MustParseAddr("192.0.2.13")
	createPod(t, vlanNS, "access-a", c.Nodes[0], vlanPod(100, a1))
	createPod(t, vlanNS, "access-b", c.Nodes[1], vlanPod(100, b1))
	createPod(t, vlanNS, "access-200", c.Nodes[0], vlanPod(200, a2))
	pa := readyPod(t, vlanNS, "access-a", c.Nodes[0])
	pb := readyPod(t, vlanNS, "access-b", c.Nodes[1])
	p200 := readyPod(t, vlanNS, "access-200", c.Nodes[0])
	for _, s := range []struct {
		netns string
		addr  netip.Addr
	}{{clientNS.Path(), clientIP}, {pa.netns, a1}, {pb.netns, b1}, {p200.netns, a2}} {
		packets.EchoServer(t, s.netns, netip.AddrPortFrom(s.addr, echoPort))
	}
	reaches(t, "VLAN 100 on node 1 to VLAN 100 on node 2", pa.netns, b1)
	reaches(t, "VLAN 100 on node 2 to VLAN 100 on node 1", pb.netns, a1)
	reaches(t, "VLAN 100 on node 1 to the client", pa.netns, clientIP)
	reaches(t, "VLAN 100 on node 2 to the client", pb.netns, clientIP)
	// At once: each waits its whole 3 s for an echo that must not come.
	var wg sync.WaitGroup
	for _, dst := range []struct {
		what string
		addr netip.Addr
	}{{"VLAN 200 to VLAN 100 on its own node", a1}, {"VLAN 200 to VLAN 100 on the other node", b1}, {"VLAN 200 to the client", clientIP}} {
		wg.Go(func() { reachesNot(t, dst.what, p200.netns, dst.addr) })
	}
	wg.Wait()
	if !t.Failed() {
		t.Log("PASS access ports: VLAN 100 across the switch both ways and to the client; VLAN 200 isolated")
		// The exchanges between the nodes crossed both trunk NICs.
		t.Logf("PASS uplink per node: %s on %s and %s on %s, from one config.uplink %q",
			uplinks[0], c.Nodes[0].Name, uplinks[1], c.Nodes[1].Name, strings.Join(uplinks, ","))
	}
}
