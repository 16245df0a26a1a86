package main

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/state"
)

// TestRouteBounds: with forwarding.routablePrefixes allowing everything, a
// route of podwire.io/routes that is a default route or half of one, or
// overlaps the pod's own network, the cluster's pod CIDRs or a node IP (the
// agent's cluster file), is refused with CNI error 7 naming the
// annotation, the prefix and the bound, and nothing is left; a route
// outside them is admitted (the control).
func TestRouteBounds(t *testing.T) {
	for _, tc := range []struct {
		route, bound string // bound "" is admitted
	}{
		{"198.51.100.0/25", ""},
		{"0.0.0.0/0", "default route"},
		{"128.0.0.0/1", "half of one"},
		{"::/1", "half of one"},
		{"10.244.0.0/16", "pod CIDR 10.244.1.0/24"},
		{"192.0.2.0/24", "node IP 192.0.2.11/32"},
		{"10.199.0.128/25", "primary's result 10.199.0.0/24"},
	} {
		t.Run(tc.route, func(t *testing.T) {
			n := newTestNode(t)
			p := router
			p.ann = map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": tc.route}
			n.wire(p)
			if _, err := nodetables.WriteCluster(n.dir, nodetables.Cluster{Nodes: 2,
				PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("10.244.2.0/24")},
				NodeIPs:  []netip.Prefix{netip.MustParsePrefix("192.0.2.11/32")}}); err != nil {
				t.Fatal(err)
			}
			wide := map[string]any{"forwarding": map[string]any{"namespaces": []string{"nf-*"},
				"routablePrefixes": []string{"0.0.0.0/0", "::/0"}}}
			args := n.args(p, true, n.conf("1.0.0", p, true, wide))
			_, _, err := testutils.CmdAddWithArgs(args, func() error { return n.p.cmdAdd(args) })
			if tc.bound == "" {
				if err != nil {
					t.Fatalf("ADD with route %s: %v", tc.route, err)
				}
				return
			}
			var e *types.Error
			if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "podwire.io/routes") ||
				!strings.Contains(err.Error(), tc.route) || !strings.Contains(err.Error(), tc.bound) {
				t.Fatalf("ADD with route %s: %v; want CNI error 7 naming podwire.io/routes, %s and %q", tc.route, err, tc.route, tc.bound)
			}
			rec := &state.Record{ContainerID: p.id, IfName: "eth0", HostIfName: p.hostIf, Addresses: []netip.Addr{netip.MustParseAddr(p.ip4)}}
			n.assertGone("refused route", p, n.podElements(rec))
		})
	}
}
