package scale

import (
	"net/netip"
	"testing"
)

// TestRouteOf: the prefixes of 5,120 Nodes over 16 generations lie inside
// routable and are all distinct, and no fake pod CIDR overlaps them.
func TestRouteOf(t *testing.T) {
	seen := map[netip.Prefix]string{}
	for i := 0; i < 5120; i += 10 {
		for g := range 16 {
			p := routeOf(i, g)
			if !routable.Contains(p.Addr()) || p.Bits() != 28 {
				t.Fatalf("node %d, generation %d: %s outside %s", i, g, p, routable)
			}
			if prev, ok := seen[p]; ok {
				t.Fatalf("node %d, generation %d: %s already %s's", i, g, p, prev)
			}
			seen[p] = fakeName(i)
		}
	}
	if n := fakeNode(5119); !fakePodCIDRs.Contains(netip.MustParsePrefix(n.Spec.PodCIDR).Addr()) {
		t.Errorf("node 5119's pod CIDR %s outside %s", n.Spec.PodCIDR, fakePodCIDRs)
	}
}
