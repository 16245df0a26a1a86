package integration

import (
	"context"
	"encoding/hex"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/sourcecheck"
)

// driftConf is relConf with egress SNAT on, so that a second podwire table
// (inet podwire-egress, one element per pod address) drifts too.
func driftConf() map[string]any {
	c := relConf()
	c["egress"] = map[string]any{"ips": []string{"203.0.113.10", "2001:db8::10"}, "exceptCIDRs": []string{"10.244.0.0/16", "fd00:244::/32"}}
	return c
}

// driftSpec is relSpec(i) with driftConf.
func driftSpec(i int) podSpec {
	s := relSpec(i)
	s.podwire = driftConf()
	return s
}

// egressHave reads the pod source sets of inet podwire-egress (hex keys), nil
// when the table is absent.
func egressHave(t *testing.T, n *node) []string {
	t.Helper()
	c := n.nftConn()
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tb := range tables {
		if tb.Name != "podwire-egress" {
			continue
		}
		for _, name := range []string{"pods4", "pods6"} {
			s, err := c.GetSetByName(tb, name)
			if err != nil {
				t.Fatalf("set %s of inet podwire-egress: %v", name, err)
			}
			els, err := c.GetSetElements(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range els {
				out = append(out, hex.EncodeToString(e.Key))
			}
		}
	}
	sort.Strings(out)
	return out
}

// egressWant is every live pod's addresses (forwarding pods too).
func egressWant(live []relPod) []string {
	var out []string
	for _, rp := range live {
		out = append(out, hex.EncodeToString(nft.AddrKey(rp.p.v4)), hex.EncodeToString(nft.AddrKey(rp.p.v6)))
	}
	sort.Strings(out)
	return out
}

func driftAssert(t *testing.T, n *node, live []relPod, gone []int) {
	t.Helper()
	relAssertNode(t, n, live, gone)
	if got, want := egressHave(t, n), egressWant(live); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("inet podwire-egress pod sources = %v, want %v", got, want)
	}
}

// wantErrNaming fails unless err is an error whose text names every one of
// names.
func wantErrNaming(t *testing.T, what string, err error, names ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s passed, want an error naming %q", what, names)
		return
	}
	for _, s := range names {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: error does not name %q: %v", what, s, err)
		}
	}
}

// TestDriftTablesRepaired: the ruleset flushed (`nft flush ruleset`), or one
// of podwire's tables deleted. CHECK of every pod fails naming the table;
// GC keeping the pods succeeds and removes nothing; the next ADD rebuilds the
// tables with the old pods' elements (exact, with the new pod's); CHECK of
// the old pods passes again; DEL of everything leaves nothing.
func TestDriftTablesRepaired(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drift func(c *nftables.Conn)
		names []string // what CHECK must name
	}{
		{"flush ruleset", func(c *nftables.Conn) { c.FlushRuleset() }, []string{"inet podwire", "missing"}},
		{"delete inet podwire", func(c *nftables.Conn) {
			c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire"})
		}, []string{"inet podwire", "missing"}},
		{"delete inet podwire-egress", func(c *nftables.Conn) {
			c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire-egress"})
		}, []string{"inet podwire-egress", "missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			a := relPod{p: n.mustAddPod(driftSpec(1)), i: 1}
			b := relPod{p: n.mustAddPod(driftSpec(3)), i: 3, fwd: true}
			list := a.p.List
			driftAssert(t, n, []relPod{a, b}, nil)

			c := n.nftConn()
			tc.drift(c)
			if err := c.Flush(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			wantErrNaming(t, "CHECK of an ordinary pod after "+tc.name, a.p.Check(), tc.names...)
			wantErrNaming(t, "CHECK of a forwarding pod after "+tc.name, b.p.Check(), tc.names...)
			if err := n.gc(list, a.p, b.p); err != nil {
				t.Errorf("GC keeping both pods after %s: %v", tc.name, err)
			}
			if got := len(n.records()); got != 2 {
				t.Errorf("GC keeping both pods left %d records, want 2", got)
			}

			cp := relPod{p: n.mustAddPod(driftSpec(2)), i: 2}
			driftAssert(t, n, []relPod{a, b, cp}, nil)
			for _, rp := range []relPod{a, b, cp} {
				if err := rp.p.Check(); err != nil {
					t.Errorf("CHECK of pod %d after the repairing ADD: %v", rp.i, err)
				}
			}
			for _, rp := range []relPod{a, b, cp} {
				if err := rp.p.Del(); err != nil {
					t.Errorf("DEL of pod %d: %v", rp.i, err)
				}
			}
			driftAssert(t, n, nil, []int{3})
		})
	}
}

// TestDriftHostVethDeleted: someone deletes the pods' host veths (the
// primary plugin's links podwire keys its elements and routes on). CHECK
// fails naming the veth; GC keeping one pod removes the other's record and
// elements; DEL of the other succeeds although its veth and route are gone.
func TestDriftHostVethDeleted(t *testing.T) {
	n := newNode(t)
	a := relPod{p: n.mustAddPod(driftSpec(1)), i: 1}
	b := relPod{p: n.mustAddPod(driftSpec(3)), i: 3, fwd: true}
	ha, hb := a.p.hostIf(), b.p.hostIf()
	n.Do(func() error {
		for _, h := range []string{ha, hb} {
			l, err := netlinksafe.LinkByName(h)
			if err != nil {
				return err
			}
			if err := netlink.LinkDel(l); err != nil {
				return err
			}
		}
		return nil
	})
	// Through the whole chain ptp's CHECK fails first (eth0 went with the
	// pair); podwire's own CHECK, with the cached result, names the veth.
	for _, rp := range []relPod{a, b} {
		if err := rp.p.Check(); err == nil {
			t.Errorf("CHECK of pod %d through the chain passed without its host veth", rp.i)
		}
		wantErrNaming(t, "podwire's CHECK without the host veth", podwireCheck(rp.p), rp.p.hostIf())
	}
	b.routeGone = true

	if err := n.gc(a.p.List, b.p); err != nil {
		t.Fatalf("GC keeping the forwarding pod: %v\n%s", err, relTail(n.Log(), 20))
	}
	driftAssert(t, n, []relPod{b}, []int{1})
	if err := b.p.Del(); err != nil {
		t.Fatalf("DEL of the forwarding pod without its veth: %v\n%s", err, relTail(n.Log(), 20))
	}
	if err := b.p.DelNoNetns(); err != nil {
		t.Fatalf("second DEL: %v", err)
	}
	driftAssert(t, n, nil, []int{1, 3})
}

// TestDriftInsideTable: the table is there but its content drifted: one
// pod element deleted, or the source-check chain's rules flushed (which
// would silently turn the check off). CHECK fails naming the set or the
// chain. The next ADD restores the rules (the test fails if it does not),
// and CHECK passes again.
func TestDriftInsideTable(t *testing.T) {
	n := newNode(t)
	a := relPod{p: n.mustAddPod(driftSpec(1)), i: 1}
	tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire"}

	c := n.nftConn()
	set, err := c.GetSetByName(tbl, "pod-v4")
	if err != nil {
		t.Fatal(err)
	}
	key := nft.Concat(nft.IfNameKey(a.p.hostIf()), nft.AddrKey(a.p.v4))
	if err := c.SetDeleteElements(set, []nftables.SetElement{{Key: key}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("delete element: %v", err)
	}
	wantErrNaming(t, "CHECK after an element was deleted", a.p.Check(), "pod-v4", "inet podwire")
	if err := a.p.Del(); err != nil {
		t.Fatalf("DEL with an element already gone: %v", err)
	}
	relAssertNode(t, n, nil, nil)

	a = relPod{p: n.mustAddPod(driftSpec(1)), i: 1}
	c = n.nftConn()
	c.FlushChain(&nftables.Chain{Table: tbl, Name: "filter-prerouting"})
	if err := c.Flush(); err != nil {
		t.Fatalf("flush chain: %v", err)
	}
	wantErrNaming(t, "CHECK after the source-check rules were flushed", a.p.Check(), "filter-prerouting")
	b := relPod{p: n.mustAddPod(driftSpec(2)), i: 2}
	rules, err := n.nftConn().GetRules(tbl, &nftables.Chain{Table: tbl, Name: "filter-prerouting"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != len(sourcecheck.Table().Chains[0].Rules) {
		t.Fatalf("the ADD after the rules were flushed left %d rules in filter-prerouting, want %d",
			len(rules), len(sourcecheck.Table().Chains[0].Rules))
	}
	for _, rp := range []relPod{a, b} {
		if err := rp.p.Check(); err != nil {
			t.Errorf("CHECK of pod %d after the repairing ADD: %v", rp.i, err)
		}
	}
	driftAssert(t, n, []relPod{a, b}, nil)
}

// podwireCheck runs CHECK of podwire alone (the chain without ptp), with
// the result libcni cached for the attachment as prevResult.
func podwireCheck(p *pod) error {
	list := *p.List
	list.Plugins = p.List.Plugins[len(p.List.Plugins)-1:]
	return p.n.NS.Do(func(ns.NetNS) error {
		return p.n.CNI.CheckNetworkList(context.Background(), &list, p.RT)
	})
}

// TestDriftRepairedByADD: the source check is switched off behind podwire's
// back while its table stays (the chain flushed, its final drop rule
// deleted, a foreign accept rule inserted at its top). Packets prove each
// drift turned enforcement off (a spoofed source passes), and that the next
// ADD of another pod, through libcni, turns it on again: the spoof is
// dropped, the first pod's own traffic still passes (its elements were
// re-added from its record) and its CHECK passes.
func TestDriftRepairedByADD(t *testing.T) {
	tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire"}
	chain := &nftables.Chain{Table: tbl, Name: "filter-prerouting"}
	for _, tc := range []struct {
		name  string
		drift func(t *testing.T, c *nftables.Conn)
	}{
		{"flush chain", func(t *testing.T, c *nftables.Conn) { c.FlushChain(chain) }},
		{"delete the drop rule", func(t *testing.T, c *nftables.Conn) {
			rules, err := c.GetRules(tbl, chain)
			if err != nil || len(rules) == 0 {
				t.Fatalf("rules of filter-prerouting: %d %v", len(rules), err)
			}
			if err := c.DelRule(rules[len(rules)-1]); err != nil {
				t.Fatal(err)
			}
		}},
		{"foreign accept rule", func(t *testing.T, c *nftables.Conn) {
			c.InsertRule(&nftables.Rule{Table: tbl, Chain: chain, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			be := n.newBackend()
			srv := listenTCP(t, be.ns, "[::]:0")
			dst := netip.AddrPortFrom(be.v4, srv.port())
			p := n.mustAddPod(podSpec{})
			if err := eventually(3*time.Second, func() error { return dialTCP(p.NS, p.v4, dst, time.Second) }); err != nil {
				t.Fatalf("pod's own traffic: %v", err)
			}
			spoof := spoofSetup(t, n, p, false)
			if err := dialTCP(p.NS, spoof, dst, time.Second); err == nil {
				t.Fatalf("spoofed source %s passed before any drift", spoof)
			}

			c := n.nftConn()
			tc.drift(t, c)
			if err := c.Flush(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if err := dialTCP(p.NS, spoof, dst, time.Second); err != nil {
				t.Fatalf("after %s the spoof is still dropped (%v): the drift did not turn the check off, so this test proves nothing", tc.name, err)
			}
			wantErrNaming(t, "CHECK after "+tc.name, p.Check(), "inet podwire", "filter-prerouting")

			n.mustAddPod(podSpec{})
			if err := dialTCP(p.NS, spoof, dst, time.Second); err == nil {
				t.Fatalf("after %s and another ADD the spoofed source %s passes: the ADD did not repair the source check", tc.name, spoof)
			}
			if err := dialTCP(p.NS, p.v4, dst, time.Second); err != nil {
				t.Errorf("after the repair the pod's own traffic from %s: %v", p.v4, err)
			}
			if err := p.Check(); err != nil {
				t.Errorf("CHECK after the repair: %v", err)
			}
		})
	}
}
