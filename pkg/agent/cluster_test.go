package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// testNode is a Node with one pod CIDR, one InternalIP and, when routes
// is not "", NodeRoutesAnnotation.
func testNode(name, podCIDR, ip, routes string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Spec.PodCIDRs = []string{podCIDR}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	if routes != "" {
		n.Annotations = map[string]string{NodeRoutesAnnotation: routes}
	}
	return n
}

// storeNodes is a ClusterNodes whose cache holds nodes (no informer runs).
func storeNodes(t *testing.T, nodes ...*corev1.Node) *ClusterNodes {
	c := newClusterNodes(&cache.ListWatch{}, t.TempDir(), 0)
	for _, n := range nodes {
		if err := c.informer.GetStore().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func hostRoutes(first netip.Addr, k int) string {
	s := make([]string, k)
	for i := range s {
		s[i] = netip.PrefixFrom(first, 32).String()
		first = first.Next()
	}
	return strings.Join(s, ",")
}

// TestNodeDataBounded: what one Node publishes in its annotation reaches
// neither the egress exceptions nor the routes of another node unless it
// passes the bounds: a default route, a half of the address space, a Node
// over the cap, a prefix over a pod CIDR are refused by name; a forged
// InternalIP inside another node's prefix withdraws nothing. The same
// Nodes through the reading before the bounds (every annotation copied
// into Cluster.Routes) made 0.0.0.0/0, ::/0, 0.0.0.0/1 and the 5,000 /32s
// egress exceptions of every node.
func TestNodeDataBounded(t *testing.T) {
	bounds := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24"),
		netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("2001:db8:100::/48")}
	c := storeNodes(t,
		testNode("a", "10.244.0.0/24", "10.99.0.11", ""),
		// b serves 198.51.100.0/25 honestly.
		testNode("b", "10.244.1.0/24", "10.99.0.12", "198.51.100.0/25,2001:db8:100::/64"),
		// c's kubelet: every address, and its InternalIP forged into
		// b's prefix.
		testNode("c", "10.244.2.0/24", "198.51.100.7", "0.0.0.0/0,::/0"),
		testNode("d", "10.244.3.0/24", "10.99.0.14", "0.0.0.0/1,10.244.1.0/25,203.0.113.0/24"),
		testNode("e", "10.244.4.0/24", "10.99.0.15", hostRoutes(netip.MustParseAddr("203.0.113.0"), 5000)),
		testNode("f", "10.244.5.0/24", "10.99.0.16", "198.51.100.128/25,garbage"),
	)
	reads := 0
	boundsFn := func() ([]netip.Prefix, error) { reads++; return bounds, nil }
	local := []netip.Prefix{netip.MustParsePrefix("198.51.100.200/32")}
	r := c.Ranges("a", local, boundsFn)
	wantRoutes := []string{"198.51.100.0/25", "198.51.100.200/32", "203.0.113.0/24", "2001:db8:100::/64"}
	var got []string
	for _, p := range r.Routes {
		got = append(got, p.String())
	}
	if !slices.Equal(got, wantRoutes) {
		t.Errorf("egress exceptions from Nodes %v, want %v", got, wantRoutes)
	}
	accepted, refused := c.Accepted("a", boundsFn)
	var acc []string
	for _, p := range accepted {
		acc = append(acc, p.Prefix.String()+"@"+p.Node)
	}
	if want := []string{"198.51.100.0/25@b", "2001:db8:100::/64@b", "203.0.113.0/24@d"}; !slices.Equal(acc, want) {
		t.Errorf("accepted %v, want %v", acc, want)
	}
	all := strings.Join(refused, "\n")
	for _, w := range []string{
		"0.0.0.0/0 of node c: a default route",
		"::/0 of node c: a default route",
		"0.0.0.0/1 of node d: outside forwarding.routablePrefixes",
		"10.244.1.0/25 of node d: overlaps a pod CIDR",
		fmt.Sprintf("node e: 5000 prefixes in %s, over the cap of %d: none used", NodeRoutesAnnotation, MaxNodePrefixes),
		"node f: " + NodeRoutesAnnotation,
		"node c: InternalIP 198.51.100.7 lies inside forwarding.routablePrefixes",
	} {
		if !strings.Contains(all, w) {
			t.Errorf("refused:\n%s\nwant a line with %q", all, w)
		}
	}
	if strings.Contains(all, "198.51.100.128/25") {
		t.Errorf("node f's valid prefix used although its annotation does not parse: %s", all)
	}
	if reads == 0 {
		t.Error("bounds never read")
	}
}

// TestNodeCap: a Node at the cap contributes all of its prefixes, one
// over it none.
func TestNodeCap(t *testing.T) {
	bounds := func() ([]netip.Prefix, error) { return []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}, nil }
	for _, k := range []int{MaxNodePrefixes, MaxNodePrefixes + 1} {
		c := storeNodes(t, testNode("a", "10.244.0.0/24", "10.99.0.11", ""),
			testNode("b", "10.244.1.0/24", "10.99.0.12", hostRoutes(netip.MustParseAddr("203.0.113.0"), k)))
		accepted, refused := c.Accepted("a", bounds)
		want := k
		if k > MaxNodePrefixes {
			want = 0
		}
		if len(accepted) != want || (want == 0) != (len(refused) == 1) {
			t.Errorf("%d prefixes: %d accepted (want %d), refused %q", k, len(accepted), want, refused)
		}
	}
}

// TestNoBoundsNoRoutes: without forwarding.routablePrefixes known, no
// Node's prefix is accepted, and each says why.
func TestNoBoundsNoRoutes(t *testing.T) {
	c := storeNodes(t, testNode("a", "10.244.0.0/24", "10.99.0.11", ""),
		testNode("b", "10.244.1.0/24", "10.99.0.12", "198.51.100.0/24"))
	accepted, refused := c.Accepted("a", func() ([]netip.Prefix, error) { return nil, fmt.Errorf("no entry") })
	if len(accepted) != 0 || len(refused) != 1 || !strings.Contains(refused[0], "routablePrefixes unknown: no entry") {
		t.Errorf("accepted %v, refused %q", accepted, refused)
	}
}

// TestAcceptedOnChange: Accepted parses the Nodes again only after the
// informer delivered a change of what it reads (an annotation, a pod CIDR,
// an address), not after a status update of anything else (the kubelet's
// heartbeat conditions), and follows the bounds.
func TestAcceptedOnChange(t *testing.T) {
	cs := fake.NewClientset(testNode("a", "10.244.0.0/24", "10.99.0.11", ""),
		testNode("b", "10.244.1.0/24", "10.99.0.12", "198.51.100.0/25"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) { return cs.CoreV1().Nodes().List(ctx, o) },
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	// The fake answers no watch-list stream: say so, as its informers do.
	c := newClusterNodes(cache.ToListWatcherWithWatchListSemantics(lw, cs), t.TempDir(), 0)
	go c.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.Synced) {
		t.Fatal("not synced")
	}
	bounds := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	boundsFn := func() ([]netip.Prefix, error) { return bounds, nil }
	first, _ := c.Accepted("a", boundsFn)
	if len(first) != 1 {
		t.Fatalf("accepted %v", first)
	}
	gen := c.gen.Load()
	update := func(mut func(n *corev1.Node)) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Get(ctx, "b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mut(n)
		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: not within 5 s", what)
			}
		}
	}
	update(func(n *corev1.Node) {
		n.ResourceVersion = "2" // the fake sets none
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	})
	// The heartbeat reaches the cache; the generation stays.
	waitFor("the heartbeat in the cache", func() bool {
		n := c.node("b")
		return n != nil && n.ResourceVersion == "2"
	})
	if again, _ := c.Accepted("a", boundsFn); c.gen.Load() != gen || &again[0] != &first[0] {
		t.Errorf("a heartbeat recomputed the accepted prefixes (generation %d, was %d)", c.gen.Load(), gen)
	}
	update(func(n *corev1.Node) {
		n.ResourceVersion = "3"
		n.Annotations[NodeRoutesAnnotation] = "198.51.100.0/25,198.51.100.128/26"
	})
	waitFor("the new annotation accepted", func() bool { acc, _ := c.Accepted("a", boundsFn); return len(acc) == 2 })
	bounds = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/25")}
	if acc, _ := c.Accepted("a", boundsFn); len(acc) != 1 {
		t.Errorf("after the bounds narrowed: accepted %v, want 198.51.100.0/25 only", acc)
	}
}

// TestNodeAddressesCapped: a Node listing more InternalIPs than
// MaxNodeAddresses adds only the first ones to every node's egress
// exceptions, and is named; before the cap, every address a kubelet
// wrote on its Node became an exception of every node.
func TestNodeAddressesCapped(t *testing.T) {
	n := testNode("b", "10.244.1.0/24", "10.99.0.12", "")
	for i := range 100 {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP,
			Address: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}).String()})
	}
	c := storeNodes(t, testNode("a", "10.244.0.0/24", "10.99.0.11", ""), n)
	bounds := func() ([]netip.Prefix, error) { return nil, nil }
	r := c.Ranges("a", nil, bounds)
	if len(r.NodeIPs) != 1+MaxNodeAddresses || !slices.Contains(r.NodeIPs, netip.MustParsePrefix("10.99.0.12/32")) {
		t.Errorf("node IPs %v: want a's and the first %d of b's", r.NodeIPs, MaxNodeAddresses)
	}
	_, refused := c.Accepted("a", bounds)
	if len(refused) != 1 || !strings.Contains(refused[0], "node b: 101 InternalIP addresses, over the cap") {
		t.Errorf("refused %q, want node b named", refused)
	}
}

// TestPrefixIndex: the index answers as a scan of the set does, for
// prefixes inside, around, across and beside the set's, of both families
// and of lengths shorter and longer than the set's.
func TestPrefixIndex(t *testing.T) {
	set := []netip.Prefix{
		netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("10.244.7.0/24"),
		netip.MustParsePrefix("10.245.0.0/16"), netip.MustParsePrefix("192.0.2.128/25"),
		netip.MustParsePrefix("fd00:10:244::/64"), netip.MustParsePrefix("fd00:10:244:9::/64"),
	}
	x := newPrefixIndex(set)
	for _, s := range []string{
		"10.244.0.0/24", "10.244.0.128/25", "10.244.0.7/32", "10.244.0.0/16", "10.244.1.0/24", "10.244.6.0/24",
		"10.244.4.0/22", "10.244.8.0/21", "10.245.3.0/24", "10.0.0.0/8", "0.0.0.0/0", "192.0.2.0/25",
		"192.0.2.0/24", "192.0.2.200/29", "198.51.100.0/24", "255.255.255.255/32", "0.0.0.0/32",
		"fd00:10:244::/48", "fd00:10:244:1::/64", "fd00:10:244:8::/61", "fd00:10:244:9::1/128", "::/0",
		"2001:db8::/32", "ffff::/16",
	} {
		p := netip.MustParsePrefix(s)
		if got, want := x.overlaps(p), slices.ContainsFunc(set, p.Overlaps); got != want {
			t.Errorf("%s: overlaps %v, a scan says %v", p, got, want)
		}
	}
	if newPrefixIndex(nil).overlaps(netip.MustParsePrefix("0.0.0.0/0")) {
		t.Error("the empty set overlaps 0.0.0.0/0")
	}
}

// TestProtobufConfig: the Node informer's clients ask for protobuf, with
// JSON as a fallback; the config they were copied from is left as it was.
func TestProtobufConfig(t *testing.T) {
	cfg := &rest.Config{Host: "https://192.0.2.1:6443", UserAgent: "podwire-agent/test"}
	pb := ProtobufConfig(cfg)
	if pb.ContentType != "application/vnd.kubernetes.protobuf" ||
		pb.AcceptContentTypes != "application/vnd.kubernetes.protobuf,application/json" || pb.UserAgent != cfg.UserAgent {
		t.Errorf("content type %q, accept %q, user agent %q", pb.ContentType, pb.AcceptContentTypes, pb.UserAgent)
	}
	if cfg.ContentType != "" || cfg.AcceptContentTypes != "" {
		t.Errorf("the original config changed: %q, %q", cfg.ContentType, cfg.AcceptContentTypes)
	}
}

// scaleNodes is n Nodes as a large cluster has them: a /24 pod CIDR and
// an InternalIP each, and on every tenth a published /28 inside
// 198.18.0.0/15.
func scaleNodes(n int) []*corev1.Node {
	out := make([]*corev1.Node, n)
	for i := range out {
		routes := ""
		if i%10 == 0 {
			routes = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18 + byte(i>>12), byte(i >> 4), byte(i << 4)}), 28).String()
		}
		out[i] = testNode(fmt.Sprintf("node-%05d", i), fmt.Sprintf("10.%d.%d.0/24", 64+i>>8, i&255),
			fmt.Sprintf("172.16.%d.%d", i>>8, i&255), routes)
	}
	return out
}

// BenchmarkAccepted: what one change of one Node's data costs an agent of
// a cluster of 5,000 Nodes (Accepted over every Node, and Ranges), the
// work of a routes and an egress pass after the informer's event. Figures
// are make bench-scale's to report, not asserted.
func BenchmarkAccepted(b *testing.B) {
	c := newClusterNodes(&cache.ListWatch{}, b.TempDir(), 0)
	for _, n := range scaleNodes(5000) {
		if err := c.informer.GetStore().Add(n); err != nil {
			b.Fatal(err)
		}
	}
	bounds := func() ([]netip.Prefix, error) { return []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, nil }
	b.ReportAllocs()
	for b.Loop() {
		c.gen.Add(1)
		acc, refused := c.Accepted("node-00001", bounds)
		if len(acc) != 500 || len(refused) != 0 {
			b.Fatalf("accepted %d, refused %v", len(acc), refused)
		}
		if r := c.Ranges("node-00001", nil, bounds); len(r.PodCIDRs) != 5000 {
			b.Fatalf("%d pod CIDRs", len(r.PodCIDRs))
		}
	}
}

// TestRangesCached: the every-Node part of Ranges is computed again only
// after a change the informer's handlers counted.
func TestRangesCached(t *testing.T) {
	c := storeNodes(t, testNode("a", "10.244.0.0/24", "10.99.0.11", ""), testNode("b", "10.244.1.0/24", "10.99.0.12", ""))
	bounds := func() ([]netip.Prefix, error) { return nil, nil }
	r1, r2 := c.Ranges("a", nil, bounds), c.Ranges("a", nil, bounds)
	if len(r1.PodCIDRs) != 2 || &r1.PodCIDRs[0] != &r2.PodCIDRs[0] {
		t.Fatalf("pod CIDRs %v computed again without a change", r2.PodCIDRs)
	}
	_ = c.informer.GetStore().Add(testNode("c", "10.244.2.0/24", "10.99.0.13", ""))
	c.gen.Add(1) // what the informer's handler does
	if r3 := c.Ranges("a", nil, bounds); r3.Nodes != 3 || len(r3.PodCIDRs) != 3 || len(r3.NodeIPs) != 3 {
		t.Errorf("after a third Node: %+v", r3)
	}
}
