package agent

import (
	"net/netip"
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
	if want, _ := c.remoteRoutes(acc, local); len(want) != 0 || reads != 0 {
		t.Fatalf("no Node publishes: routes %v, bounds read %d times", want, reads)
	}
	_ = c.informer.GetStore().Add(testNode("b", "10.244.1.0/24", "10.99.0.12", "198.51.100.0/24"))
	c.gen.Add(1) // what the informer's handler does
	acc, _ = c.Accepted("a", bounds)
	want, skipped := c.remoteRoutes(acc, local)
	if len(want) != 0 || len(skipped) != 1 || !strings.Contains(skipped[0], "198.51.100.0/24 of node b: served by this node") {
		t.Errorf("routed %v, skipped %q; want nothing routed, served by this node", want, skipped)
	}
	if reads != 1 {
		t.Errorf("bounds read %d times, want once", reads)
	}
}
