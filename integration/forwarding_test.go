package integration

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/google/nftables"
)

// fwdConfig admits forwarding pods in namespaces "nf-*", routes to the
// client networks behind them, and extra source prefixes inside
// 10.99.0.0/16 and fd99::/48.
var fwdConfig = map[string]any{
	"forwarding": map[string]any{
		"namespaces":       []string{"nf-*"},
		"routablePrefixes": []string{"198.51.100.0/24", "2001:db8:100::/64"},
		"sourcePrefixes":   []string{"10.99.0.0/16", "fd99::/48"},
	},
}

// clientBehind makes a client netns behind pod f (a network f forwards
// for): f side "cl0" 198.51.100.1/24 and 2001:db8:100::1/64, client
// 198.51.100.10 and 2001:db8:100::10 with default routes via f.
func clientBehind(t *testing.T, f *pod) (ns.NetNS, netip.Addr, netip.Addr) {
	t.Helper()
	c4, c6 := netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("2001:db8:100::10")
	cns := hostBehind(t, f.NS, "cl0",
		netip.MustParsePrefix("198.51.100.1/24"), netip.MustParsePrefix("2001:db8:100::1/64"), c4, c6)
	return cns, c4, c6
}

// TestForwardingPodCarriesTraffic: a forwarding pod in an allowed namespace
// carries a client network behind it to a server behind the node and back,
// in both directions, with the client's own address: podwire turned
// forwarding on in the pod (the test does not), lifted the source check,
// and routed the client network to the pod (podwire.io/routes).
func TestForwardingPodCarriesTraffic(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(famName(v6), func(t *testing.T) {
			n := newNode(t)
			be := n.newBackend()
			f := n.mustAddPod(podSpec{namespace: "nf-edge", podwire: fwdConfig, annotations: map[string]string{
				"podwire.io/forwarding": "true",
				"podwire.io/routes":     "198.51.100.0/24,2001:db8:100::/64",
			}})
			cns, c4, c6 := clientBehind(t, f)
			client, server := c4, be.v4
			if v6 {
				client, server = c6, be.v6
			}
			srv := listenTCP(t, be.ns, "[::]:0")
			if err := eventually(5*time.Second, func() error {
				return dialTCP(cns, netip.Addr{}, netip.AddrPortFrom(server, srv.port()), time.Second)
			}); err != nil {
				t.Fatalf("client %s -> server %s through the forwarding pod: %v\nlog:\n%s", client, server, err, n.Log())
			}
			if !srv.sawPeer(client) {
				t.Fatalf("server did not see the client's own address %s: %v", client, srv.peers)
			}
			cl := listenTCP(t, cns, "[::]:0")
			if err := dialTCP(be.ns, netip.Addr{}, netip.AddrPortFrom(client, cl.port()), 2*time.Second); err != nil {
				t.Fatalf("server %s -> client %s (podwire.io/routes return path): %v", server, client, err)
			}
			if !cl.sawPeer(server) {
				t.Fatalf("client did not see the server's address %s", server)
			}
			if err := f.Check(); err != nil {
				t.Fatalf("CHECK: %v", err)
			}
			if err := f.Del(); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			dst := netip.MustParsePrefix("198.51.100.0/24")
			if v6 {
				dst = netip.MustParsePrefix("2001:db8:100::/64")
			}
			if rs := n.nodeRoutes(dst); len(rs) != 0 {
				t.Fatalf("routes to %s left after DEL: %v", dst, rs)
			}
		})
	}
}

// TestForwardingPodWithoutAnnotationIsChecked: the same topology with an
// ordinary pod (routes given by the test) does not carry the client: the
// source check drops it. The forwarding test's pass is podwire's doing.
func TestForwardingPodWithoutAnnotationIsChecked(t *testing.T) {
	n := newNode(t)
	be := n.newBackend()
	p := n.mustAddPod(podSpec{namespace: "nf-edge", podwire: fwdConfig, annotations: map[string]string{
		"podwire.io/routes": "198.51.100.0/24",
	}})
	cns, _, _ := clientBehind(t, p)
	// Forwarding as podwire would set it, so that only the check differs.
	if err := p.NS.Do(func(ns.NetNS) error {
		_, err := sysctl.Sysctl("net.ipv4.ip_forward", "1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := listenTCP(t, be.ns, "[::]:0")
	if err := dialTCP(cns, netip.Addr{}, netip.AddrPortFrom(be.v4, srv.port()), time.Second); err == nil {
		t.Fatal("an ordinary pod forwarded a client's traffic through the source check")
	}
}

// TestAllowedSourcePrefixes: the check stays, and exactly the listed
// prefixes are admitted besides the pod's own addresses.
func TestAllowedSourcePrefixes(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(famName(v6), func(t *testing.T) {
			n := newNode(t)
			be := n.newBackend()
			p := n.mustAddPod(podSpec{namespace: "nf-a", podwire: fwdConfig, annotations: map[string]string{
				"podwire.io/allowed-source-prefixes": `["10.99.0.0/24","fd99::/64"]`,
			}})
			srv := listenTCP(t, be.ns, "[::]:0")
			dst := netip.AddrPortFrom(be.v4, srv.port())
			in, out := "10.99.0.5", "10.98.0.5"
			if v6 {
				dst = netip.AddrPortFrom(be.v6, srv.port())
				in, out = "fd99::5", "fd98::5"
			}
			for _, a := range []string{in, out} {
				bits, via, fam := "/32", p.v4, "-4"
				if v6 {
					bits, via, fam = "/128", p.v6, "-6"
				}
				doIn(t, p.NS, [][]string{{"ip", fam, "addr", "add", a + bits, "dev", "eth0", "nodad"}})
				n.Do(func() error {
					return run("ip", fam, "route", "add", a+bits, "via", via.String(), "dev", p.hostIf())
				})
			}
			if err := eventually(3*time.Second, func() error {
				return dialTCP(p.NS, netip.MustParseAddr(in), dst, time.Second)
			}); err != nil {
				t.Fatalf("source %s inside the allowed prefixes: %v", in, err)
			}
			if err := dialTCP(p.NS, netip.MustParseAddr(out), dst, time.Second); err == nil {
				t.Fatalf("source %s outside the allowed prefixes passed", out)
			}
			if err := dialTCP(p.NS, p.addr(v6), dst, time.Second); err != nil {
				t.Fatalf("pod's own address %s: %v", p.addr(v6), err)
			}
		})
	}
}

// TestForwardingGatesAndVerbs: the gates refuse with code 7 naming the
// annotation and the config key and leave nothing behind; CHECK sees a
// missing element, route or sysctl; DEL removes routes and elements, also
// as a second DEL without netns and prevResult; the rp_filter warning is
// logged when the node's all.rp_filter is on.
func TestForwardingGatesAndVerbs(t *testing.T) {
	for _, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			n := newNode(t)
			refusals := []struct {
				name, ns, key, gate string
				ann                 map[string]string
			}{
				{"namespace gate", "default", "podwire.io/forwarding", "forwarding.namespaces",
					map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": "198.51.100.0/24"}},
				{"namespace gate, prefixes", "default", "podwire.io/allowed-source-prefixes", "forwarding.namespaces",
					map[string]string{"podwire.io/allowed-source-prefixes": "10.0.0.0/8"}},
				{"routes gate", "nf-x", "podwire.io/routes", "forwarding.routablePrefixes",
					map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": "203.0.113.0/24"}},
			}
			for _, r := range refusals {
				_, err := n.addPod(podSpec{version: v, namespace: r.ns, podwire: fwdConfig, annotations: r.ann})
				if cniCode(err) != 7 || !strings.Contains(err.Error(), r.key) || !strings.Contains(err.Error(), r.gate) {
					t.Fatalf("%s: err = %v (code %d), want code 7 naming %s and %s", r.name, err, cniCode(err), r.key, r.gate)
				}
				n.mustRecords(t, 0, "after the "+r.name+" refusal")
				if c := n.podSetCount(); c != 0 {
					t.Fatalf("%s: %d set elements left", r.name, c)
				}
				for _, d := range []string{"198.51.100.0/24", "203.0.113.0/24"} {
					if rs := n.nodeRoutes(netip.MustParsePrefix(d)); len(rs) != 0 {
						t.Fatalf("%s: route to %s left: %v", r.name, d, rs)
					}
				}
			}

			// rp_filter on for the whole node: the forwarding ADD says so.
			n.Do(func() error { _, err := sysctl.Sysctl("net.ipv4.conf.all.rp_filter", "1"); return err })
			f := n.mustAddPod(podSpec{version: v, namespace: "nf-x", podwire: fwdConfig, annotations: map[string]string{
				"podwire.io/forwarding": "true", "podwire.io/routes": "198.51.100.0/24,2001:db8:100::/64",
			}})
			if !strings.Contains(n.Log(), "net.ipv4.conf.all.rp_filter is 1") {
				t.Errorf("no rp_filter warning in the log:\n%s", n.Log())
			}
			n.Do(func() error { _, err := sysctl.Sysctl("net.ipv4.conf.all.rp_filter", "0"); return err })
			o := n.mustAddPod(podSpec{version: v, namespace: "nf-x", podwire: fwdConfig, annotations: map[string]string{
				"podwire.io/allowed-source-prefixes": "10.99.0.0/24",
			}})
			if got := len(n.setElements("checked")); got != 1 {
				t.Fatalf("checked interfaces = %d, want 1 (the forwarding pod is not checked)", got)
			}
			if got := len(n.setElements("allowed-v4")); got != 1 {
				t.Fatalf("allowed-v4 elements = %d, want 1", got)
			}
			// CHECK (0.4.0 and later) sees tampering with what the pod has.
			if hasCheck(v) {
				for _, p := range []*pod{f, o} {
					if err := p.Check(); err != nil {
						t.Fatalf("CHECK: %v", err)
					}
				}

				// CHECK after tampering: an element, a route, a sysctl.
				c := n.nftConn()
				tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire"}
				set, err := c.GetSetByName(tbl, "pod-v4")
				if err != nil {
					t.Fatal(err)
				}
				els, _ := c.GetSetElements(set)
				if err := c.SetDeleteElements(set, els); err != nil {
					t.Fatal(err)
				}
				if err := c.Flush(); err != nil {
					t.Fatal(err)
				}
				if err := o.Check(); err == nil {
					t.Fatal("CHECK passed with the pod's element removed")
				}
				n.Do(func() error { return run("ip", "route", "del", "198.51.100.0/24") })
				if err := f.Check(); err == nil || !strings.Contains(err.Error(), "198.51.100.0/24") {
					t.Fatalf("CHECK with the route removed: %v", err)
				}
				n.Do(func() error {
					return run("ip", "route", "add", "198.51.100.0/24", "via", f.v4.String(), "dev", f.hostIf(), "onlink")
				})
				n.Do(func() error { _, err := sysctl.Sysctl("net.ipv4.conf."+f.hostIf()+".rp_filter", "2"); return err })
				if err := f.Check(); err == nil || !strings.Contains(err.Error(), "rp_filter") {
					t.Fatalf("CHECK with host rp_filter 2: %v", err)
				}
				if err := f.NS.Do(func(ns.NetNS) error { _, err := sysctl.Sysctl("net.ipv4.ip_forward", "0"); return err }); err != nil {
					t.Fatal(err)
				}
				n.Do(func() error { _, err := sysctl.Sysctl("net.ipv4.conf."+f.hostIf()+".rp_filter", "0"); return err })
				if err := f.Check(); err == nil || !strings.Contains(err.Error(), "ip_forward") {
					t.Fatalf("CHECK with ip_forward 0 in the pod: %v", err)
				}
			}

			for _, p := range []*pod{f, o} {
				if err := p.Del(); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				if err := p.DelNoNetns(); err != nil {
					t.Fatalf("DEL without netns and prevResult: %v", err)
				}
			}
			for _, d := range []string{"198.51.100.0/24", "2001:db8:100::/64"} {
				if rs := n.nodeRoutes(netip.MustParsePrefix(d)); len(rs) != 0 {
					t.Fatalf("route to %s left after DEL: %v", d, rs)
				}
			}
			if c := n.podSetCount(); c != 0 {
				t.Fatalf("%d set elements left after DEL", c)
			}
			n.mustRecords(t, 0, "after DEL")
		})
	}
}

// TestForwardingDelVanishedNetnsAndGC: a forwarding pod's DEL after its
// netns vanished (no netns, no prevResult) removes its routes; podwire's GC
// removes the routes and elements of an attachment that is not valid.
func TestForwardingDelVanishedNetnsAndGC(t *testing.T) {
	n := newNode(t)
	list := n.conflist("1.1.0", fwdConfig)
	f := n.mustAddPod(podSpec{namespace: "nf-x", podwire: fwdConfig, annotations: map[string]string{
		"podwire.io/forwarding": "true", "podwire.io/routes": "2001:db8:100::/64",
	}})
	o := n.mustAddPod(podSpec{namespace: "nf-x", podwire: fwdConfig, annotations: map[string]string{
		"podwire.io/routes": "198.51.100.0/24", "podwire.io/allowed-source-prefixes": "10.99.0.0/24",
	}})
	if len(n.nodeRoutes(netip.MustParsePrefix("2001:db8:100::/64"))) != 1 || len(n.nodeRoutes(netip.MustParsePrefix("198.51.100.0/24"))) != 1 {
		t.Fatal("routes of podwire.io/routes missing after ADD")
	}
	f.ReleaseNS()
	if err := f.DelNoNetns(); err != nil {
		t.Fatalf("DEL after the netns vanished: %v", err)
	}
	if rs := n.nodeRoutes(netip.MustParsePrefix("2001:db8:100::/64")); len(rs) != 0 {
		t.Fatalf("route left after DEL without netns: %v", rs)
	}
	if err := os.RemoveAll(filepath.Join(n.Dir, "cache")); err != nil {
		t.Fatal(err)
	}
	if err := n.gc(list); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if rs := n.nodeRoutes(netip.MustParsePrefix("198.51.100.0/24")); len(rs) != 0 {
		t.Fatalf("route left after GC: %v", rs)
	}
	if c := n.podSetCount(); c != 0 {
		t.Fatalf("%d set elements left after GC", c)
	}
	n.mustRecords(t, 0, "after GC")
	_ = o
}
