package multinode

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// The forwarding gates of the suite's values: forwarding pods in
// forwardingNS, which may route routedNet and routedNet6.
const forwardingNS = "nf-router"

var (
	routedNet  = netip.MustParsePrefix("198.51.100.0/24")
	routedNet6 = netip.MustParsePrefix("2001:db8:5100::/64")
)

// TestForwardingAcrossNodes: a router pod on node 1 serves a client network
// behind it (podwire.io/routes, both families). With no route written on
// any node by hand:
//   - a pod on node 2 reaches a host of that network and gets its answers
//     (node 2's agent routes the prefixes that node 1's agent published on
//     its Node, via node 2's next hop to node 1's pod CIDR: flannel.1);
//   - the outside network reaches it too, routing the prefixes to node 1
//     as it would from the Node's annotation (a BGP speaker's job), and
//     the host sees the outside's own address;
//   - when the router pod goes, the annotation and node 2's routes go.
func TestForwardingAcrossNodes(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	kubectl(t, "", "create", "namespace", forwardingNS)
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", forwardingNS, "--wait=true", "--timeout=90s") })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	routes := routedNet.String() + "," + routedNet6.String()
	if err := createPod(ctx, forwardingNS, "router", n1, nil, map[string]string{
		"podwire.io/forwarding": "true", "podwire.io/routes": routes,
	}); err != nil {
		t.Fatal(err)
	}
	router, err := waitPod(ctx, forwardingNS, "router", n1)
	if err != nil {
		t.Fatal(err)
	}
	hostIP, hostIP6 := routedNet.Addr().Next().Next(), routedNet6.Addr().Next().Next()
	behind, release, err := cluster.NetworkBehind(router.netns,
		[]netip.Prefix{netip.PrefixFrom(routedNet.Addr().Next(), 24), netip.PrefixFrom(routedNet6.Addr().Next(), 64)},
		[]netip.Prefix{netip.PrefixFrom(hostIP, 24), netip.PrefixFrom(hostIP6, 64)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	const port = 7403
	udpEchoServer(t, behind, port)

	// From a pod on node 2, which has egress IPs: node 2's agent routes
	// the prefixes within a few of its ticks, and excepts them from its
	// egress SNAT like pod CIDRs (what the host sees is then up to
	// flannel's masquerade, never node 2's egress IP).
	egressOnEveryNode(t)
	egress4, egress6 := egressIPs(1)
	client := runPod(t, "default", "fwd-client", n2, nil)
	for _, dst := range []netip.Addr{hostIP, hostIP6} {
		var src string
		err := cnitest.Eventually(45*time.Second, func() (err error) {
			if src, err = packets.Exchange(client.netns, netip.AddrPortFrom(dst, port), 10*time.Second); err != nil {
				return err
			}
			if src == egress4.String() || src == egress6.String() {
				return fmt.Errorf("the host saw node 2's egress IP %s: the prefix is not excepted from egress SNAT", src)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("a pod on %s did not reach %s behind the router on %s and back: %v\nroutes of %s:\n%s",
				n2.Name, dst, n1.Name, err, n2.Name, nodeRoutes(t, n2))
		}
		t.Logf("pod %s on %s reached %s behind %s on %s and back (the host saw %s)", client.name, n2.Name, dst, router.name, n1.Name, src)
	}

	// From the outside, routing the prefixes to the node that publishes
	// them.
	published := nodeAnnotation(t, n1.Name, "podwire.io/routes")
	if published != routes {
		t.Errorf("%s's podwire.io/routes is %q, want %q", n1.Name, published, routes)
	}
	outsideRoutes(t, []netip.Prefix{routedNet, routedNet6}, n1)
	for _, dst := range []netip.Addr{hostIP, hostIP6} {
		src, err := exchangeFrom(c.OutsideNetNS, netip.AddrPortFrom(dst, port))
		if err != nil {
			t.Fatalf("the outside did not reach %s behind the router and back: %v", dst, err)
		}
		if own := []netip.Addr{cluster.OutsideIP, cluster.OutsideIP6, serverIP, serverIP6}; !slices.Contains(own, src) {
			t.Errorf("the host behind the router saw the outside as %s, want one of its own addresses %v", src, own)
		}
	}
	t.Logf("the outside reached both hosts behind the router with its own address")

	// The router goes: its node withdraws the prefixes and node 2 drops
	// its routes.
	if err := deletePod(ctx, forwardingNS, "router"); err != nil {
		t.Fatal(err)
	}
	if err := cnitest.Eventually(60*time.Second, func() error {
		if v := nodeAnnotation(t, n1.Name, "podwire.io/routes"); v != "" {
			return fmt.Errorf("%s still publishes %q", n1.Name, v)
		}
		if r := nodeRoutes(t, n2); r != "" {
			return fmt.Errorf("%s still routes:\n%s", n2.Name, r)
		}
		return nil
	}); err != nil {
		t.Fatalf("after the router's deletion: %v", err)
	}
}

// nodeRoutes is node n's routes toward other nodes' forwarding pods ("ip
// route" lines of protocol 45, both families).
func nodeRoutes(t *testing.T, n *cluster.Node) string {
	t.Helper()
	var out []string
	for _, fam := range []string{"-4", "-6"} {
		b, err := n.Command(context.Background(), "ip", fam, "route", "show", "proto", "45").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: ip route: %v\n%s", n.Name, err, b)
		}
		if s := strings.TrimSpace(string(b)); s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "\n")
}

// nodeAnnotation is a Node's annotation ("" when absent).
func nodeAnnotation(t *testing.T, node, key string) string {
	t.Helper()
	return strings.TrimSpace(kubectl(t, "", "get", "node", node, "-o",
		"jsonpath={.metadata.annotations."+strings.NewReplacer(".", `\.`, "/", `\/`).Replace(key)+"}"))
}

// outsideRoutes routes prefixes from the outside network to node n's
// uplink addresses, until the test ends.
func outsideRoutes(t *testing.T, ps []netip.Prefix, n *cluster.Node) {
	t.Helper()
	for _, p := range ps {
		via := n.IP
		if p.Addr().Is6() {
			via = n.IP6
		}
		r := &netlink.Route{Dst: netipNet(p), Gw: net.IP(via.AsSlice())}
		if err := ns.WithNetNSPath(c.OutsideNetNS, func(ns.NetNS) error { return netlink.RouteAdd(r) }); err != nil {
			t.Fatalf("outside: route %s via %s: %v", p, via, err)
		}
		t.Cleanup(func() {
			_ = ns.WithNetNSPath(c.OutsideNetNS, func(ns.NetNS) error { return netlink.RouteDel(r) })
		})
	}
}
