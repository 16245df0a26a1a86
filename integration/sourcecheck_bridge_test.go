package integration

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/packets"
	"github.com/podwire/podwire/pkg/nft"
)

// newBridgedNode is a node whose primary is bridgePrimary.
func newBridgedNode(t testing.TB) *node {
	n := newNode(t)
	n.Base.PrimaryEntry = bridgePrimary(n)
	return n
}

// bridgePrimary is the reference bridge plugin on cni0 with host-local,
// dual stack, as flannel's CNI plugin delegates to it (isGateway,
// isDefaultGateway, hairpinMode).
func bridgePrimary(n *node) map[string]any {
	return map[string]any{
		"type":             "bridge",
		"bridge":           "cni0",
		"isGateway":        true,
		"isDefaultGateway": true,
		"hairpinMode":      true,
		"mtu":              1500,
		"ipam": map[string]any{
			"type":    "host-local",
			"dataDir": filepath.Join(n.Dir, "ipam"),
			"ranges": []any{
				[]any{map[string]string{"subnet": n.Base.V4Pool}},
				[]any{map[string]string{"subnet": n.Base.V6Pool}},
			},
		},
	}
}

// brNetfilterModes are the node's br_netfilter settings the bridged check
// must hold under: br_netfilter passes bridged IP to the inet hooks (1, the
// default once the module is loaded, as kube-proxy and most installers load
// it) or not (0). They are set in the node's netns (per-netns sysctls since
// Linux 5.3), never on the host.
var brNetfilterModes = []string{"0", "1"}

func setBrNetfilter(t *testing.T, n *node, v string) {
	t.Helper()
	var kv [][2]string
	for _, k := range []string{"iptables", "ip6tables", "arptables"} {
		kv = append(kv, [2]string{"net.bridge.bridge-nf-call-" + k, v})
	}
	if err := cnitest.Sysctls(n.NS, kv...); err != nil {
		t.Fatalf("br_netfilter sysctls in the node netns: %v", err)
	}
}

// TestBridgedSourceCheck: on a bridging primary (the bridge plugin on
// cni0, at cniVersion 0.3.1 as flannel writes it and at 1.0.0), with
// br_netfilter passing bridged IP to the inet hooks and without, an
// ordinary pod a:
//   - reaches a server behind the node and pod b on the same bridge from its
//     own IPv4 and IPv6 addresses;
//   - cannot reach either from a forged source (10.99.0.5, fd99::5) nor from
//     pod c's addresses (c is a neighbour on the same bridge);
//   - cannot claim c's addresses by gratuitous ARP or unsolicited NA (pod b
//     captures every frame the bridge floods to it), while its claims of its
//     own addresses reach b.
//
// A forwarding pod f on the same bridge sends from the forged source to both
// and is seen, and a pod g with allowed-source-prefixes 10.99.0.0/24 is seen
// from 10.99.0.5 but not from 10.98.0.5: so the drops above are podwire's.
func TestBridgedSourceCheck(t *testing.T) {
	for _, v := range []string{"0.3.1", "1.0.0"} {
		for _, brnf := range brNetfilterModes {
			t.Run(fmt.Sprintf("%s/bridge-nf-call-iptables=%s", v, brnf), func(t *testing.T) {
				testBridgedSourceCheck(t, v, brnf)
			})
		}
	}
}

func testBridgedSourceCheck(t *testing.T, version, brnf string) {
	n := newBridgedNode(t)
	setBrNetfilter(t, n, brnf)
	be := n.newBackend()
	const port = 9911
	out := newSink(t, be.ns.Path(), port)

	a := n.mustAddPod(podSpec{version: version, name: "a"})
	b := n.mustAddPod(podSpec{version: version, name: "b"})
	c := n.mustAddPod(podSpec{version: version, name: "c"})
	f := n.mustAddPod(podSpec{version: version, name: "f", namespace: "nf-x", podwire: fwdConfig,
		annotations: map[string]string{"podwire.io/forwarding": "true"}})
	g := n.mustAddPod(podSpec{version: version, name: "g", namespace: "nf-x", podwire: fwdConfig,
		annotations: map[string]string{"podwire.io/allowed-source-prefixes": "10.99.0.0/24"}})
	for _, p := range []*pod{a, b, c, f, g} {
		if p.Version != version {
			t.Fatalf("result cniVersion %q, want %q", p.Version, version)
		}
	}
	in := newSink(t, b.NS.Path(), port)
	frames := captureFrames(t, b.NS)

	type send struct {
		from *pod
		src  netip.Addr
		pass bool
	}
	forged4, forged6 := netip.MustParseAddr("10.99.0.5"), netip.MustParseAddr("fd99::5")
	sends := []send{
		{a, a.v4, true}, {a, a.v6, true},
		{a, forged4, false}, {a, forged6, false},
		{a, c.v4, false}, {a, c.v6, false},
		{f, forged4, true}, {f, forged6, true},
		{g, forged4, true}, {g, netip.MustParseAddr("10.98.0.5"), false},
	}
	type dst struct {
		name string
		sink *packets.Sink
		v4   netip.Addr
		v6   netip.Addr
	}
	for _, d := range []dst{{"the server behind the node", out, be.v4, be.v6}, {"pod b on the same bridge", in, b.v4, b.v6}} {
		for i, s := range sends {
			to := netip.AddrPortFrom(d.v4, port)
			if s.src.Is6() {
				to = netip.AddrPortFrom(d.v6, port)
			}
			payload := fmt.Sprintf("%s-%d", d.name, i)
			if err := packets.SendFrom(s.from.NS.Path(), s.src, to, payload, 3); err != nil {
				t.Fatal(err)
			}
			if s.pass {
				if !d.sink.WaitGot(s.src, payload, 3*time.Second) {
					t.Errorf("%s did not receive what a pod sent from %s (it must pass)", d.name, s.src)
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
		for i, s := range sends {
			if payload := fmt.Sprintf("%s-%d", d.name, i); !s.pass && d.sink.Got(s.src, payload) {
				t.Errorf("%s received a forged source %s (it must be dropped)", d.name, s.src)
			}
		}
	}

	// Claims on the segment: a's own addresses reach b, c's do not.
	frames.drain()
	for _, ip := range []netip.Addr{a.v4, c.v4} {
		if err := packets.SendGratuitousARP(a.NS.Path(), "eth0", ip); err != nil {
			t.Fatal(err)
		}
	}
	for _, ip := range []netip.Addr{a.v6, c.v6} {
		if err := packets.SendNeighborAdvert(a.NS.Path(), "eth0", a.v6, ip); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	got := frames.drain()
	if count(got, isGratuitousARP(a.v4)) == 0 || count(got, isNeighborAdvert(a.v6)) == 0 {
		t.Fatalf("pod b saw no ARP or NA of a's own %s, %s: the capture cannot prove the drops below", a.v4, a.v6)
	}
	if k := count(got, isARPFrom(c.v4)); k != 0 {
		t.Errorf("pod b saw %d ARP packets from a claiming c's %s", k, c.v4)
	}
	if k := count(got, isNeighborAdvert(c.v6)); k != 0 {
		t.Errorf("pod b saw %d neighbour advertisements from a claiming c's %s", k, c.v6)
	}
	if t.Failed() {
		t.Logf("log:\n%s", n.Log())
	}
}

// TestBridgedCheckDriftRepaired: the bridge table drifts behind podwire's
// back, and what the node agent runs (`podwire repair`) puts it back.
//   - Its chain flushed: a forged source from a bridged pod passes (so the
//     drift turned the check off), CHECK fails naming "bridge podwire" and
//     the chain, and after the repair the forgery is dropped again.
//   - The pod's own element deleted: its own traffic is dropped (so the
//     element mattered), CHECK names the set, and the repair re-adds it.
func TestBridgedCheckDriftRepaired(t *testing.T) {
	n := newBridgedNode(t)
	be := n.newBackend()
	const port = 9912
	sink := newSink(t, be.ns.Path(), port)
	a := n.mustAddPod(podSpec{version: "1.0.0", name: "a"})
	conflist := n.writeConflist("1.0.0", nil)
	repair := func() {
		t.Helper()
		n.Do(func() error { return run(podwireBin, "repair", "--conflist", conflist) })
	}
	seq := 0
	reaches := func(src netip.Addr) bool {
		t.Helper()
		seq++
		payload := fmt.Sprintf("drift-%d", seq)
		if err := packets.SendFrom(a.NS.Path(), src, netip.AddrPortFrom(be.v4, port), payload, 3); err != nil {
			t.Fatal(err)
		}
		return sink.WaitGot(src, payload, time.Second)
	}
	forged := netip.MustParseAddr("10.99.0.5")
	if !reaches(a.v4) || reaches(forged) {
		t.Fatalf("before any drift: own %s must pass and forged %s must be dropped", a.v4, forged)
	}

	tbl := &nftables.Table{Family: nftables.TableFamilyBridge, Name: "podwire"}
	c := n.nftConn()
	c.FlushChain(&nftables.Chain{Table: tbl, Name: "filter-prerouting"})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if !reaches(forged) {
		t.Fatal("with the bridge chain flushed a forged source is still dropped: the drift did not turn the check off, so this test proves nothing")
	}
	wantErrNaming(t, "CHECK after the bridge chain was flushed", a.Check(), "bridge podwire", "filter-prerouting")
	repair()
	if reaches(forged) || !reaches(a.v4) {
		t.Fatalf("after podwire repair: own %s must pass and forged %s must be dropped\nlog:\n%s", a.v4, forged, n.Log())
	}
	if err := a.Check(); err != nil {
		t.Fatalf("CHECK after the repair: %v", err)
	}

	c = n.nftConn()
	set, err := c.GetSetByName(tbl, "pod-v4")
	if err != nil {
		t.Fatal(err)
	}
	key := nft.Concat(nft.IfNameKey(hostVeth(t, a)), nft.AddrKey(a.v4))
	if err := c.SetDeleteElements(set, []nftables.SetElement{{Key: key}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("delete element: %v", err)
	}
	if reaches(a.v4) {
		t.Fatal("with its element deleted the pod's own source still passes: the element is not what lets it through")
	}
	wantErrNaming(t, "CHECK after an element was deleted", a.Check(), "pod-v4", "bridge podwire")
	repair()
	if !reaches(a.v4) {
		t.Fatalf("after podwire repair the pod's own %s is still dropped\nlog:\n%s", a.v4, n.Log())
	}
	if err := a.Check(); err != nil {
		t.Fatalf("CHECK after the repair: %v", err)
	}
}

// hostVeth is the pod's host veth on a bridging primary: the result's
// interface without sandbox that is not the bridge.
func hostVeth(t *testing.T, p *pod) string {
	t.Helper()
	for _, i := range p.Result.Interfaces {
		if i.Sandbox == "" && i.Name != "cni0" {
			return i.Name
		}
	}
	t.Fatalf("no host veth in %+v", p.Result)
	return ""
}

// TestBridgedPodsDelAndGC: a bridged pod's elements live in bridge podwire,
// and every way a runtime removes a pod finds them there from the record:
// DEL, then a second DEL without netns and prevResult, removes a's and
// leaves b's, whose forged source is still dropped; GC without b among the
// valid attachments removes b's and its record. No element is left in
// either source-check table.
func TestBridgedPodsDelAndGC(t *testing.T) {
	n := newBridgedNode(t)
	be := n.newBackend()
	const port = 9913
	sink := newSink(t, be.ns.Path(), port)
	a := n.mustAddPod(podSpec{version: "1.1.0", name: "a"})
	b := n.mustAddPod(podSpec{version: "1.1.0", name: "b"})
	checked := func() []string {
		t.Helper()
		var ports []string
		for _, e := range n.familySetElements(nftables.TableFamilyBridge, "checked") {
			ports = append(ports, strings.TrimRight(string(e.Key), "\x00"))
		}
		if inet := n.podSetCount(); inet != 0 {
			t.Errorf("inet podwire holds %d elements of bridged pods", inet)
		}
		return ports
	}
	if got := checked(); len(got) != 2 {
		t.Fatalf("bridge podwire checks ports %v, want a's and b's", got)
	}
	if err := a.Del(); err != nil {
		t.Fatalf("DEL a: %v", err)
	}
	if err := a.DelNoNetns(); err != nil {
		t.Fatalf("second DEL of a without netns and prevResult: %v", err)
	}
	if got := checked(); len(got) != 1 || got[0] != hostVeth(t, b) {
		t.Fatalf("after a's DELs bridge podwire checks %v, want only b's %s", got, hostVeth(t, b))
	}
	forged := netip.MustParseAddr("10.99.0.5")
	if err := packets.SendFrom(b.NS.Path(), forged, netip.AddrPortFrom(be.v4, port), "after-del", 3); err != nil {
		t.Fatal(err)
	}
	if sink.WaitGot(forged, "after-del", time.Second) {
		t.Fatal("b's forged source passed after a's DEL: b's elements went with a's")
	}
	if err := n.gc(b.List); err != nil {
		t.Fatalf("GC with no valid attachment: %v", err)
	}
	if got := checked(); len(got) != 0 {
		t.Fatalf("after GC bridge podwire still checks %v", got)
	}
	for _, set := range []string{"pod-v4", "pod-v6"} {
		if els := n.familySetElements(nftables.TableFamilyBridge, set); len(els) != 0 {
			t.Errorf("after GC %s of bridge podwire holds %d elements", set, len(els))
		}
	}
	if recs := n.records(); len(recs) != 0 {
		t.Errorf("records after GC: %v", recs)
	}
}
