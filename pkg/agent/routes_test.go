package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestRemoteRoutesLocalWins: an accepted prefix that this node's records
// route too is not routed toward the other node, and says so; the bounds
// are read only when some Node publishes a prefix.
func TestRemoteRoutesLocalWins(t *testing.T) {
	c := storeNodes(t, testNode("a", "10.244.0.0/24", "10.99.0.11", ""))
	reads := 0
	bounds := func() ([]netip.Prefix, error) {
		reads++
		return []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, nil
	}
	local := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	acc, _ := c.Accepted("a", bounds)
	if want, _ := c.remoteRoutes(acc, local, noHops); len(want) != 0 || reads != 0 {
		t.Fatalf("no Node publishes: routes %v, bounds read %d times", want, reads)
	}
	_ = c.informer.GetStore().Add(testNode("b", "10.244.1.0/24", "10.99.0.12", "198.51.100.0/24"))
	c.gen.Add(1) // what the informer's handler does
	acc, _ = c.Accepted("a", bounds)
	want, skipped := c.remoteRoutes(acc, local, noHops)
	if len(want) != 0 || len(skipped) != 1 || !strings.Contains(skipped[0], "198.51.100.0/24 of node b: served by this node") {
		t.Errorf("routed %v, skipped %q; want nothing routed, served by this node", want, skipped)
	}
	if reads != 1 {
		t.Errorf("bounds read %d times, want once", reads)
	}
}

// noHops is a next-hop lookup that must not be called.
func noHops(a netip.Addr) (netip.Addr, string, error) {
	panic("next hop of " + a.String() + " asked")
}

// TestNextHopsCached: a pass resolves the next hop of each other node's
// pod CIDR once; the next pass, with one Node more, resolves that Node's
// only; after the node's routes changed (a route notification), every one
// again. Failures are asked again at every pass.
func TestNextHopsCached(t *testing.T) {
	bounds := func() ([]netip.Prefix, error) { return []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, nil }
	c := storeNodes(t, testNode("a", "10.244.0.0/24", "10.99.0.11", ""),
		testNode("b", "10.244.1.0/24", "10.99.0.12", "198.51.100.0/28"),
		testNode("c", "10.244.2.0/24", "10.99.0.13", "198.51.100.16/28"),
		testNode("d", "10.244.3.0/24", "10.99.0.14", "198.51.100.32/28"))
	var asked []string
	resolve := func(a netip.Addr) (netip.Addr, string, error) {
		asked = append(asked, a.String())
		if a == netip.MustParseAddr("10.244.3.1") {
			return netip.Addr{}, "", fmt.Errorf("no route to %s", a)
		}
		return netip.MustParseAddr("10.99.0.1"), "eth0", nil
	}
	var hops nextHops
	pass := func(what string, want ...string) {
		t.Helper()
		asked = nil
		acc, _ := c.Accepted("a", bounds)
		routes, _ := c.remoteRoutes(acc, nil, hops.resolver(resolve))
		if !slices.Equal(asked, want) {
			t.Errorf("%s: resolved %v, want %v", what, asked, want)
		}
		for _, r := range routes {
			if r.Dev != "eth0" || r.Gw != netip.MustParseAddr("10.99.0.1") {
				t.Errorf("%s: route %s", what, r)
			}
		}
	}
	pass("first pass", "10.244.1.1", "10.244.2.1", "10.244.3.1")
	pass("nothing changed", "10.244.3.1")
	_ = c.informer.GetStore().Add(testNode("e", "10.244.4.0/24", "10.99.0.15", "198.51.100.48/28"))
	c.gen.Add(1)
	pass("a Node more", "10.244.3.1", "10.244.4.1")
	hops.fibChanged()
	pass("after a route change", "10.244.1.1", "10.244.2.1", "10.244.3.1", "10.244.4.1")
}
