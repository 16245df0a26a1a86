package integration

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/integration/packets"
)

// TestRoutesNodeScope is the control of the multi-node suite's
// TestClaimsAcrossNodes (integration/k8s/multinode): with claimScope
// "node", as on these agentless nodes, each node checks a pod's
// podwire.io/routes against its own records only, so routers on two nodes
// are both wired with the same prefix and each node routes it to its own
// pod (a datagram from each node to an address of the prefix reaches that
// node's router): the overlap that the cluster-wide claim (claimScope
// "cluster", through the agents' ClaimPools) refuses on the second node.
func TestRoutesNodeScope(t *testing.T) {
	const prefix = "198.51.100.0/24"
	dst := netip.MustParseAddr("198.51.100.7")
	spec := podSpec{namespace: "nf-a", podwire: fwdConfig, annotations: map[string]string{
		"podwire.io/forwarding": "true", "podwire.io/routes": prefix}}
	for _, name := range []string{"A", "B"} {
		n := newNode(t)
		p, err := n.addPod(spec)
		if err != nil {
			t.Fatalf("node %s: ADD of a router for %s, claimScope node: %v (the control needs it wired)", name, prefix, err)
		}
		// The router answers for an address of its prefix.
		if err := p.NS.Do(func(ns.NetNS) error {
			lo, err := netlinksafe.LinkByName("lo")
			if err != nil {
				return err
			}
			return netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: dst.AsSlice(), Mask: net.CIDRMask(32, 32)}})
		}); err != nil {
			t.Fatal(err)
		}
		packets.EchoServer(t, p.NS.Path(), netip.AddrPortFrom(dst, 7406))
		if _, err := packets.Exchange(n.NS.Path(), netip.AddrPortFrom(dst, 7406), 5*time.Second); err != nil {
			t.Errorf("node %s does not route %s to its router: %v", name, prefix, err)
		}
	}
}
