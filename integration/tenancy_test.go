package integration

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/podwire/podwire/pkg/agent"
)

// mustRefuse asserts that err is CNI error 7 whose message names every
// item of mention, and that the refused ADD left nothing: no record beyond
// the want ones, no held node lock.
func mustRefuse(t *testing.T, n *node, err error, records int, mention ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("ADD admitted, want a refusal naming %q", mention)
	}
	if code := cniCode(err); code != 7 {
		t.Fatalf("refusal %v: code %d, want 7", err, code)
	}
	for _, m := range mention {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("refusal %q does not name %s", err, m)
		}
	}
	if got := n.records(); len(got) != records {
		t.Errorf("records after the refusal: %v, want %d", got, records)
	}
	assertLockFree(t, n)
}

// TestRouteOverlapRefused: a forwarding pod of another namespace that
// announces a route inside a forwarding pod's route (a more specific prefix
// would take part of its return path) is refused, naming both pods and
// both prefixes, and leaves no route; the first pod's client behind it
// stays reachable from a server behind the node.
func TestRouteOverlapRefused(t *testing.T) {
	n := newNode(t)
	be := n.newBackend()
	r0 := n.mustAddPod(podSpec{namespace: "nf-a", name: "r0", podwire: fwdConfig, annotations: map[string]string{
		"podwire.io/forwarding": "true", "podwire.io/routes": "198.51.100.0/24"}})
	cns, c4, _ := clientBehind(t, r0)

	for _, tc := range []struct{ name, route string }{{"inside", "198.51.100.0/28"}, {"around", "198.51.0.0/16"}, {"equal", "198.51.100.0/24"}} {
		_, err := n.addPod(podSpec{namespace: "nf-b", name: "r1", podwire: fwdConfig, annotations: map[string]string{
			"podwire.io/forwarding": "true", "podwire.io/routes": tc.route}})
		if tc.name == "around" {
			// 198.51.0.0/16 is outside forwarding.routablePrefixes: the
			// bound refuses it before the overlap is looked at.
			mustRefuse(t, n, err, 1, "podwire.io/routes", tc.route, "forwarding.routablePrefixes")
			continue
		}
		mustRefuse(t, n, err, 1, "podwire.io/routes", tc.route, "198.51.100.0/24", "nf-a/r0", "nf-b/r1")
		if tc.route != "198.51.100.0/24" {
			if rs := n.nodeRoutes(netip.MustParsePrefix(tc.route)); len(rs) != 0 {
				t.Fatalf("route %s left by the refused ADD: %v", tc.route, rs)
			}
		}
	}

	cl := listenTCP(t, cns, "[::]:0")
	if err := dialTCP(be.ns, netip.Addr{}, netip.AddrPortFrom(c4, cl.port()), 2*time.Second); err != nil || !cl.sawPeer(be.v4) {
		t.Fatalf("server -> r0's client %s after the refusals: err %v, peers %v", c4, err, cl.peers)
	}
	if err := r0.Check(); err != nil {
		t.Fatalf("CHECK of r0: %v", err)
	}
}

// TestRouteOverlapConcurrentADDs: two pods announcing overlapping routes at
// once: exactly one is admitted (the claim check and the record's first
// write are one step under the node lock).
func TestRouteOverlapConcurrentADDs(t *testing.T) {
	n := newNode(t)
	routes := []string{"198.51.100.0/25", "198.51.100.0/26"}
	errs := make([]error, len(routes))
	var wg sync.WaitGroup
	for i, r := range routes {
		wg.Go(func() {
			_, errs[i] = n.addPod(podSpec{namespace: "nf-a", name: fmt.Sprintf("r%d", i), podwire: fwdConfig,
				annotations: map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": r}})
		})
	}
	wg.Wait()
	admitted := 0
	for i, err := range errs {
		switch {
		case err == nil:
			admitted++
		case cniCode(err) != 7 || !strings.Contains(err.Error(), "overlaps"):
			t.Errorf("ADD of %s: %v, want admitted or refused for the overlap", routes[i], err)
		}
	}
	if admitted != 1 {
		t.Fatalf("%d of 2 overlapping routes admitted (%v), want 1", admitted, errs)
	}
}

// TestSourcePrefixBounds: podwire.io/allowed-source-prefixes outside
// forwarding.sourcePrefixes is refused naming the annotation, the prefix and
// the key, with nothing left behind (TestAllowedSourcePrefixes proves, under
// the same bounds, that an admitted prefix's sources pass and others not).
func TestSourcePrefixBounds(t *testing.T) {
	n := newNode(t)
	for _, p := range []string{"10.0.0.0/8", "10.98.0.0/24", "fd99::/32"} {
		_, err := n.addPod(podSpec{namespace: "nf-a", podwire: fwdConfig,
			annotations: map[string]string{"podwire.io/allowed-source-prefixes": "10.99.0.0/24," + p}})
		mustRefuse(t, n, err, 0, "podwire.io/allowed-source-prefixes", p, "forwarding.sourcePrefixes")
	}
}

// TestEgressNodeAnnotationBounds: the Node annotation (written by the agent)
// names an IPv4 egress IP outside egress.allowedCIDRs and an IPv6 one
// inside: IPv4 pod traffic leaves from egress.ips' address, never the
// annotation's, IPv6 from the annotation's; `podwire status` shows the
// refused address as an error naming the annotation and the key.
func TestEgressNodeAnnotationBounds(t *testing.T) {
	n := newNode(t)
	peer := uplink(t, n, true)
	rogue4 := netip.MustParseAddr("203.0.113.66")
	conf := map[string]any{"egress": map[string]any{"nodeAnnotation": true, "ips": []string{egress4.String()},
		"allowedCIDRs": []string{egress4.String() + "/32", "2001:db8:e::/48"}, "exceptCIDRs": []string{"198.51.100.128/25"}}}
	ta := n.startAgent(n.primaryList("1.0.0", nil), n.podwireEntry(conf),
		knode("worker-1", map[string]string{"podwire.io/egress-ip": rogue4.String() + "," + egress6.String()}))
	n.waitEgressFile()
	a := n.mustAddPod(podSpec{podwire: conf})
	for _, tc := range []struct{ dst, want, not netip.Addr }{{ext4, egress4, rogue4}, {ext6, egress6, netip.Addr{}}} {
		srv := listenTCP(t, peer, netip.AddrPortFrom(tc.dst, 0).String())
		if err := dialTCP(a.NS, netip.Addr{}, netip.AddrPortFrom(tc.dst, srv.port()), dialTimeout); err != nil || !srv.sawPeer(tc.want) || srv.sawPeer(tc.not) {
			t.Fatalf("to %s: err %v, peers %v, want %s\n%s", tc.dst, err, srv.peers, tc.want, nftList(t, n.NS))
		}
	}

	st := n.podwireStatus(n.writeConflist("1.0.0", conf))
	found := false
	for _, w := range st.Warnings {
		if strings.HasPrefix(w, "error: ") && strings.Contains(w, rogue4.String()) &&
			strings.Contains(w, "podwire.io/egress-ip") && strings.Contains(w, "egress.allowedCIDRs") {
			found = true
		}
		if strings.Contains(w, egress6.String()) && strings.Contains(w, "allowedCIDRs") {
			t.Errorf("status refuses the IPv6 egress IP inside the bounds: %q", w)
		}
	}
	if !found {
		t.Fatalf("podwire status does not show the refused egress IP %s: %q", rogue4, st.Warnings)
	}
	waitEgressError(t, ta, rogue4.String()+", outside egress.allowedCIDRs")

	// An egress IP in effect that the node does not hold is an error too.
	n.Do(func() error {
		return runAll([][]string{{"ip", "addr", "del", egress4.String() + "/32", "dev", "uplink0"}})
	})
	waitEgressError(t, ta, "egress IP "+egress4.String()+" is not assigned")
}

// waitEgressError waits up to 10 s for the agent's error "egress" and a
// Warning Event PodwireEgressError on the Node, both containing want.
func waitEgressError(t *testing.T, ta *testAgent, want string) {
	t.Helper()
	if err := eventually(10*time.Second, func() error {
		st := ta.agent.Status()
		if !slices.ContainsFunc(st.Errors, func(e string) bool { return strings.Contains(e, want) }) {
			return fmt.Errorf("agent errors %q do not contain %q", st.Errors, want)
		}
		evs, err := ta.events.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == agent.ReasonEgressError && e.Type == "Warning" && e.InvolvedObject.Kind == "Node" && strings.Contains(e.Message, want) {
				return nil
			}
		}
		return fmt.Errorf("no Warning Event %s on the Node containing %q", agent.ReasonEgressError, want)
	}); err != nil {
		t.Fatal(err)
	}
}

// kns is a Namespace as the metadata client returns it.
func kns(name string, labels map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: ktypes.UID("ns-uid-" + name), Labels: labels}}
}

// TestForwardingNamespaceSelector: with forwarding.namespaceSelector, a pod
// asking podwire.io/forwarding is admitted in a namespace whose labels the
// selector selects (the node agent answers them) and its forged sources
// pass the node; in a namespace merely named like it, without the label,
// the same pod is refused naming the selector, and nothing is left. With no
// agent to answer the labels, a forwarding pod's ADD fails with CNI error
// 11 (the gate fails closed), while an ordinary pod's ADD needs no agent.
func TestForwardingNamespaceSelector(t *testing.T) {
	n := newNode(t)
	conf := map[string]any{"forwarding": map[string]any{
		"namespaceSelector": map[string]any{
			"matchLabels":      map[string]string{"podwire.io/forwarding": "true"},
			"matchExpressions": []any{map[string]any{"key": "team", "operator": "In", "values": []string{"nf", "edge"}}},
		},
	}}
	ta := n.startAgent(n.primaryList("0.3.1", nil), nil, knode("worker-1", nil),
		kns("nf-router", map[string]string{"podwire.io/forwarding": "true", "team": "nf"}),
		kns("nf-router-x", map[string]string{"team": "nf"}))
	fwd := map[string]string{"podwire.io/forwarding": "true"}

	p := n.mustAddPod(podSpec{namespace: "nf-router", name: "router", annotations: fwd, podwire: conf})
	be := n.newBackend()
	srv := listenTCP(t, be.ns, "[::]:0")
	spoof := spoofSetup(t, n, p, false)
	if err := eventually(3*time.Second, func() error {
		return dialTCP(p.NS, spoof, netip.AddrPortFrom(be.v4, srv.port()), time.Second)
	}); err != nil {
		t.Fatalf("forwarding pod of a selected namespace: forged source %s dropped: %v\nlog:\n%s", spoof, err, n.Log())
	}

	_, err := n.addPod(podSpec{namespace: "nf-router-x", name: "router", annotations: fwd, podwire: conf})
	mustRefuse(t, n, err, 1, "nf-router-x", "forwarding.namespaceSelector", "podwire.io/forwarding=true")

	ta.stop()
	_, err = n.addPod(podSpec{namespace: "nf-router", name: "router-2", annotations: fwd, podwire: conf})
	if cniCode(err) != 11 {
		t.Fatalf("forwarding pod's ADD with no agent to read its namespace's labels: %v (code %d), want code 11", err, cniCode(err))
	}
	if got := n.records(); len(got) != 1 {
		t.Errorf("records after the failed ADD: %v, want the first pod's only", got)
	}
	n.mustAddPod(podSpec{namespace: "nf-router", name: "plain", podwire: conf})
}
