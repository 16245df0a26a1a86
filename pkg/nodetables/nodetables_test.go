package nodetables

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/state"
)

func parse(t *testing.T, js string) *config.NetConf {
	t.Helper()
	c, err := config.Parse([]byte(js))
	if err != nil {
		t.Fatalf("config %s: %v", js, err)
	}
	return c
}

func TestTablesShape(t *testing.T) {
	for _, tc := range []struct {
		name string
		conf string
		env  Env
		want []string
	}{
		{"nothing", `{"type":"podwire"}`, Env{}, nil},
		{"azure", `{"type":"podwire","probeSNAT":{"preset":"azure"}}`, Env{Uplinks6: []string{"eth0"}}, []string{"ip6 podwire-probe-snat"}},
		{"ipv4 rule", `{"type":"podwire","probeSNAT":{"rules":[{"from":"168.63.129.16","to":"10.0.0.250"}]}}`, Env{Uplinks4: []string{"eth0"}}, []string{"ip podwire-probe-snat"}},
		{"both families and egress", `{"type":"podwire","probeSNAT":{"preset":"azure","rules":[{"from":"168.63.129.16","to":"10.0.0.250"}]},"egress":{"ips":["203.0.113.10"]}}`,
			Env{Egress4: netip.MustParseAddr("203.0.113.10")}, []string{"ip6 podwire-probe-snat", "ip podwire-probe-snat", "inet podwire-egress"}},
		{"egress by annotation only", `{"type":"podwire","kubeconfig":"/k","egress":{"nodeAnnotation":true}}`, Env{}, []string{"inet podwire-egress"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, tb := range Tables(parse(t, tc.conf), tc.env) {
				if err := tb.Validate(); err != nil {
					t.Errorf("%s: %v", tc.name, err)
				}
				got = append(got, tb.ID().String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s: tables %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

// rules are a chain's rules as expressions.
func rules(tb *nft.Table, chain string) [][]expr.Any {
	var out [][]expr.Any
	for _, c := range tb.Chains {
		if c.Name == chain {
			for _, r := range c.Rules {
				out = append(out, r.Exprs(tb.Family))
			}
		}
	}
	return out
}

func TestProbeRewriteChecksums(t *testing.T) {
	conf := parse(t, `{"type":"podwire","probeSNAT":{"preset":"azure","rules":[{"from":"168.63.129.16","to":"10.0.0.250"}]}}`)
	tbs := Tables(conf, Env{Uplinks4: []string{"eth0"}, Uplinks6: []string{"eth0"}})
	for _, tc := range []struct {
		table       int
		chain       string
		offset, len uint32
		csumOff     uint32
	}{
		{0, "prerouting", 8, 16, 8},    // ip6 saddr, csum_off in the overwritten address
		{0, "postrouting", 24, 16, 24}, // ip6 daddr
		{1, "prerouting", 12, 4, 10},   // ip saddr, header checksum
		{1, "postrouting", 16, 4, 10},  // ip daddr
	} {
		rs := rules(tbs[tc.table], tc.chain)
		last := rs[len(rs)-1]
		w, ok := last[len(last)-1].(*expr.Payload)
		if !ok || w.OperationType != expr.PayloadWrite {
			t.Fatalf("%s %s: last expression %T is not a payload write", tbs[tc.table].ID(), tc.chain, last[len(last)-1])
		}
		if w.Offset != tc.offset || w.Len != tc.len || w.CsumType != expr.CsumTypeInet ||
			w.CsumOffset != tc.csumOff || w.CsumFlags != unix.NFT_PAYLOAD_L4CSUM_PSEUDOHDR {
			t.Errorf("%s %s: write %+v, want offset %d len %d csum inet@%d with L4 pseudo-header flag",
				tbs[tc.table].ID(), tc.chain, w, tc.offset, tc.len, tc.csumOff)
		}
	}
	// The ND/RA accept comes first, on IPv6 only.
	pre6 := rules(tbs[0], "prerouting")
	if len(pre6) != 2 {
		t.Fatalf("ip6 prerouting has %d rules, want accept ND + rewrite", len(pre6))
	}
	if v, ok := pre6[0][len(pre6[0])-1].(*expr.Verdict); !ok || v.Kind != expr.VerdictAccept {
		t.Errorf("ip6 prerouting rule 0 does not end in accept: %+v", pre6[0])
	}
	if n := len(rules(tbs[1], "prerouting")); n != 1 {
		t.Errorf("ip prerouting has %d rules, want the rewrite alone", n)
	}
}

func TestHashFollowsConfigAndNode(t *testing.T) {
	base := parse(t, `{"type":"podwire","probeSNAT":{"preset":"azure"},"egress":{"ips":["203.0.113.10"],"exceptCIDRs":["10.244.0.0/16"]}}`)
	env := Env{Uplinks6: []string{"eth0"}, Egress4: base.EgressV4}
	hashes := func(c *config.NetConf, e Env) []string {
		var out []string
		for _, tb := range Tables(c, e) {
			out = append(out, tb.Hash())
		}
		return out
	}
	h0 := hashes(base, env)
	if !slices.Equal(h0, hashes(base, env)) {
		t.Fatal("hash is not stable")
	}
	moved := env
	moved.Uplinks6 = []string{"eth1"}
	if hashes(base, moved)[0] == h0[0] {
		t.Error("probe table hash ignores the uplink")
	}
	other := parse(t, `{"type":"podwire","probeSNAT":{"preset":"azure"},"egress":{"ips":["203.0.113.10"],"exceptCIDRs":["10.245.0.0/16"]}}`)
	if hashes(other, env)[1] == h0[1] {
		t.Error("egress table hash ignores exceptCIDRs")
	}
	ip := env
	ip.Egress4 = netip.MustParseAddr("203.0.113.11")
	if hashes(base, ip)[1] == h0[1] {
		t.Error("egress table hash ignores the egress IP")
	}
}

func TestIntervalElements(t *testing.T) {
	p := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return out
	}
	type iv struct {
		key string
		end bool
	}
	render := func(es []nftables.SetElement) []iv {
		var out []iv
		for _, e := range es {
			a, _ := netip.AddrFromSlice(e.Key)
			out = append(out, iv{a.String(), e.IntervalEnd})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		in     []netip.Prefix
		v4, v6 []iv
	}{
		{"none", nil, nil, nil},
		{"one", p("10.244.0.0/16"), []iv{{"10.244.0.0", false}, {"10.245.0.0", true}}, nil},
		{"nested merged", p("10.244.0.0/16", "10.0.0.0/8"), []iv{{"10.0.0.0", false}, {"11.0.0.0", true}}, nil},
		{"adjacent merged", p("10.0.0.0/9", "10.128.0.0/9"), []iv{{"10.0.0.0", false}, {"11.0.0.0", true}}, nil},
		{"disjoint", p("192.168.0.0/16", "10.0.0.0/8"), []iv{{"10.0.0.0", false}, {"11.0.0.0", true}, {"192.168.0.0", false}, {"192.169.0.0", true}}, nil},
		{"top of space has no end", p("0.0.0.0/0", "::/0"), []iv{{"0.0.0.0", false}}, []iv{{"::", false}}},
		{"v6", p("fd00::/8", "2001:db8::/32"), nil, []iv{{"2001:db8::", false}, {"2001:db9::", true}, {"fd00::", false}, {"fe00::", true}}},
	} {
		v4, v6 := intervalElements(tc.in)
		if got := render(v4); !slices.Equal(got, tc.v4) {
			t.Errorf("%s: v4 %v, want %v", tc.name, got, tc.v4)
		}
		if got := render(v6); !slices.Equal(got, tc.v6) {
			t.Errorf("%s: v6 %v, want %v", tc.name, got, tc.v6)
		}
	}
}

func TestElements(t *testing.T) {
	rec := &state.Record{ContainerID: "c", IfName: "eth0", PodNamespace: "ns", PodName: "p",
		Addresses: []netip.Addr{netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00::5")}}
	id := nft.ID{Family: nftables.TableFamilyINet, Name: egressTable}
	if e := Elements(parse(t, `{"type":"podwire"}`), rec); len(e) != 0 {
		t.Errorf("no egress: elements %v", e)
	}
	e := Elements(parse(t, `{"type":"podwire","egress":{"ips":["203.0.113.10"]}}`), rec)
	if len(e[id][setPods4]) != 1 || len(e[id][setPods6]) != 1 || e[id][setPods4][0].Comment != "ns/p" {
		t.Errorf("egress: elements %+v", e)
	}
	// A pod made an egress source keeps its elements for DEL after the
	// config dropped egress.
	rec.Egress = true
	if e := Elements(parse(t, `{"type":"podwire"}`), rec); len(e[id][setPods4]) != 1 {
		t.Errorf("recorded egress source: elements %v", e)
	}
}

// fakeConn records what RemoveAll asks for.
type fakeConn struct {
	tables  []*nftables.Table
	deleted []string
	flushes int
}

func (f *fakeConn) ListTables() ([]*nftables.Table, error) { return f.tables, nil }
func (f *fakeConn) DelTable(t *nftables.Table) {
	f.deleted = append(f.deleted, nft.ID{Family: t.Family, Name: t.Name}.String())
}
func (f *fakeConn) Flush() error { f.flushes++; return nil }

func TestRemoveAllOnlyOurs(t *testing.T) {
	f := &fakeConn{tables: []*nftables.Table{
		{Family: nftables.TableFamilyINet, Name: "podwire"},
		{Family: nftables.TableFamilyIPv6, Name: "podwire-probe-snat"},
		{Family: nftables.TableFamilyINet, Name: "kube-proxy"},
		{Family: nftables.TableFamilyIPv4, Name: "nat"},
		{Family: nftables.TableFamilyBridge, Name: "podwire-port"},
		{Family: nftables.TableFamilyINet, Name: "cni_plugins_masquerade"},
	}}
	gone, err := RemoveAll(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"inet podwire", "ip6 podwire-probe-snat", "bridge podwire-port"}
	if !slices.Equal(f.deleted, want) || len(gone) != 3 || f.flushes != 1 {
		t.Errorf("deleted %v (flushes %d), want %v in one batch", f.deleted, f.flushes, want)
	}
	f = &fakeConn{tables: []*nftables.Table{{Family: nftables.TableFamilyINet, Name: "filter"}}}
	if gone, err := RemoveAll(f); err != nil || len(gone) != 0 || f.flushes != 0 {
		t.Errorf("no podwire table: gone %v err %v flushes %d", gone, err, f.flushes)
	}
}
