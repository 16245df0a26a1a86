package vlan

import (
	"net/netip"
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
	pa := runPod(t, vlanNS, "access-a", c.Nodes[0], vlanPod(100, a1))
	pb := runPod(t, vlanNS, "access-b", c.Nodes[1], vlanPod(100, b1))
	p200 := runPod(t, vlanNS, "access-200", c.Nodes[0], vlanPod(200, a2))
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
	reachesNot(t, "VLAN 200 to VLAN 100 on its own node", p200.netns, a1)
	reachesNot(t, "VLAN 200 to VLAN 100 on the other node", p200.netns, b1)
	reachesNot(t, "VLAN 200 to the client", p200.netns, clientIP)
	if !t.Failed() {
		t.Log("PASS access ports: VLAN 100 across the switch both ways and to the client; VLAN 200 isolated")
	}
}
