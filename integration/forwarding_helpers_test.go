package integration

import (
	"net/netip"
	"testing"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/podwire/podwire/integration/packets"
	"github.com/podwire/podwire/internal/testns"
	"github.com/vishvananda/netlink"
)

// newSink is a packets.Sink on port in the netns at nsPath, closed when t
// ends.
func newSink(t testing.TB, nsPath string, port int) *packets.Sink {
	t.Helper()
	s, err := packets.NewSink(nsPath, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// backend is a netns behind the node (a server on another network), joined
// to the node by a veth: node side "srv0" 192.0.2.1/24 and 2001:db8:5::1/64,
// backend side 192.0.2.2 and 2001:db8:5::2 with default routes via the node.
type backend struct {
	ns     ns.NetNS
	v4, v6 netip.Addr
}

func (n *node) newBackend() *backend { return newBackendFor(n.t, n.NS) }

// newBackendFor is newBackend for any node netns (benchmarks).
func newBackendFor(t testing.TB, nodeNS ns.NetNS) *backend {
	t.Helper()
	bns := hostBehind(t, nodeNS, "srv0",
		netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("2001:db8:5::1/64"),
		netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8:5::2"))
	return &backend{ns: bns, v4: netip.MustParseAddr("192.0.2.2"), v6: netip.MustParseAddr("2001:db8:5::2")}
}

// hostBehind makes a netns joined to parent by a veth: parent side parentIf
// with the gateway addresses gw4 and gw6 (their prefix lengths are the
// link's), host side "eth0" with host4 and host6 and default routes via the
// gateways. The test's cleanup removes the netns.
func hostBehind(t testing.TB, parent ns.NetNS, parentIf string, gw4, gw6 netip.Prefix, host4, host6 netip.Addr) ns.NetNS {
	t.Helper()
	hns := testns.New(t)
	vethPair(t, parent, parentIf, hns, "eth0")
	doIn(t, parent, [][]string{
		{"ip", "addr", "add", gw4.String(), "dev", parentIf},
		{"ip", "-6", "addr", "add", gw6.String(), "dev", parentIf, "nodad"},
		{"ip", "link", "set", parentIf, "up"},
	})
	doIn(t, hns, [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", netip.PrefixFrom(host4, gw4.Bits()).String(), "dev", "eth0"},
		{"ip", "-6", "addr", "add", netip.PrefixFrom(host6, gw6.Bits()).String(), "dev", "eth0", "nodad"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", gw4.Addr().String()},
		{"ip", "-6", "route", "add", "default", "via", gw6.Addr().String()},
	})
	return hns
}

// vethPair makes a veth between two netns: aName in a, bName in b (down).
func vethPair(t testing.TB, a ns.NetNS, aName string, b ns.NetNS, bName string) {
	t.Helper()
	err := a.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: aName},
			PeerName:      bName,
			PeerNamespace: netlink.NsFd(int(b.Fd())),
		})
	})
	if err != nil {
		t.Fatalf("veth %s/%s: %v", aName, bName, err)
	}
}

// doIn runs commands inside netns (fatal on error).
func doIn(t testing.TB, netns ns.NetNS, cmds [][]string) {
	t.Helper()
	if err := netns.Do(func(ns.NetNS) error { return runAll(cmds) }); err != nil {
		t.Fatal(err)
	}
}

func runAll(cmds [][]string) error {
	for _, c := range cmds {
		if err := run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// hostIf is the pod's host-side veth, from ptp's result.
func (p *pod) hostIf() string {
	for _, i := range p.Result.Interfaces {
		if i.Sandbox == "" {
			return i.Name
		}
	}
	p.n.t.Fatalf("no host interface in %+v", p.Result)
	return ""
}

// addr returns the pod's primary address of the family of like.
func (p *pod) addr(v6 bool) netip.Addr {
	if v6 {
		return p.v6
	}
	return p.v4
}

// nftConn is a google/nftables connection to the node netns.
func (n *node) nftConn() *nftables.Conn {
	n.t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(n.NS.Fd())))
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// setElements returns the elements of a set of "inet podwire", or nil when
// the table is absent.
func (n *node) setElements(set string) []nftables.SetElement {
	n.t.Helper()
	return n.familySetElements(nftables.TableFamilyINet, set)
}

// familySetElements are the elements of set in the "podwire" table of
// family (inet: routed veths; bridge: bridge ports), nil without the table.
func (n *node) familySetElements(family nftables.TableFamily, set string) []nftables.SetElement {
	n.t.Helper()
	c := n.nftConn()
	tables, err := c.ListTablesOfFamily(family)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, t := range tables {
		if t.Name == "podwire" {
			s, err := c.GetSetByName(t, set)
			if err != nil {
				n.t.Fatalf("set %s: %v", set, err)
			}
			els, err := c.GetSetElements(s)
			if err != nil {
				n.t.Fatalf("elements of %s: %v", set, err)
			}
			return els
		}
	}
	return nil
}

// podSetCount is the number of elements across podwire's source-check sets.
func (n *node) podSetCount() int {
	total := 0
	for _, s := range []string{"checked", "pod-v4", "pod-v6", "allowed-v4", "allowed-v6"} {
		total += len(n.setElements(s))
	}
	return total
}

// nodeRoutes lists the node's routes to dst (both families).
func (n *node) nodeRoutes(dst netip.Prefix) []netlink.Route {
	n.t.Helper()
	var out []netlink.Route
	n.Do(func() error {
		fam := netlink.FAMILY_V4
		if dst.Addr().Is6() {
			fam = netlink.FAMILY_V6
		}
		rs, err := netlinksafe.RouteList(nil, fam)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Dst != nil && r.Dst.String() == dst.String() {
				out = append(out, r)
			}
		}
		return nil
	})
	return out
}

func famName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}
