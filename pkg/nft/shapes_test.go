package nft_test

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/transit"
	"github.com/podwire/podwire/pkg/vlanbridge"
	"github.com/podwire/podwire/pkg/vrrp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// shape is one config shape: a table and the elements of one pod.
type shape struct {
	name  string
	table *nft.Table
	elems nft.Elements
}

func mustConf(t *testing.T, js string) *config.NetConf {
	t.Helper()
	c, err := config.Parse([]byte(js))
	if err != nil {
		t.Fatalf("config %s: %v", js, err)
	}
	return c
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// shapes are every config shape podwire lays down, each with the elements
// the package's own element function gives one pod.
func shapes(t *testing.T) []shape {
	pod := sourcecheck.Pod{HostIfName: "veth1234", Addresses: addrs("10.244.1.2", "fd00:244::2"), Name: "ns/pod"}
	allowed := pod
	allowed.AllowedPrefixes = prefixes("10.99.0.0/24", "2001:db8:99::/48")
	bridged := allowed
	bridged.Bridged = true
	egress := func(js string, env nodetables.Env) (*nft.Table, nft.Elements) {
		c := mustConf(t, js)
		tbs := nodetables.Tables(c, env)
		return tbs[len(tbs)-1], nodetables.Elements(c, &state.Record{PodNamespace: "ns", PodName: "pod", Addresses: addrs("10.244.1.2", "fd00:244::2")})
	}
	probe := func(js string, env nodetables.Env, i int) *nft.Table {
		return nodetables.Tables(mustConf(t, js), env)[i]
	}
	up := nodetables.Env{Uplinks4: []string{"eth0"}, Uplinks6: []string{"eth0"}}
	e4, el4 := egress(`{"type":"podwire","egress":{"ips":["203.0.113.10"],"exceptCIDRs":["10.244.0.0/16","10.96.0.0/12","10.97.0.0/16"]}}`,
		nodetables.Env{Egress4: netip.MustParseAddr("203.0.113.10")})
	e6, el6 := egress(`{"type":"podwire","egress":{"ips":["2001:db8::10"],"exceptCIDRs":["fd00:244::/32"]}}`,
		nodetables.Env{Egress6: netip.MustParseAddr("2001:db8::10")})
	eDual, elDual := egress(`{"type":"podwire","egress":{"ips":["203.0.113.10","2001:db8::10"],"exceptCIDRs":["10.0.0.0/8","11.0.0.0/8","fd00::/8"]}}`,
		nodetables.Env{Egress4: netip.MustParseAddr("203.0.113.10"), Egress6: netip.MustParseAddr("2001:db8::10")})
	return []shape{
		{"sourcecheck", sourcecheck.Table(), sourcecheck.Elements(pod)},
		{"sourcecheck-forwarding", sourcecheck.Table(), nil}, // a forwarding pod has no elements
		{"sourcecheck-allowed", sourcecheck.Table(), sourcecheck.Elements(allowed)},
		{"sourcecheck-bridge", sourcecheck.BridgeTable(), sourcecheck.Elements(bridged)},
		{"portcheck-access", vlanbridge.PortCheckTable([]string{"eth1"}),
			vlanbridge.PortElements(&state.VLANAttachment{HostVeth: "pw1234", MAC: "02:00:00:00:12:34", PortCheck: true,
				IPs: prefixes("192.0.2.10/24", "2001:db8:1::10/64")}, "ns/pod")},
		{"portcheck-trunk", vlanbridge.PortCheckTable([]string{"eth1"}),
			vlanbridge.PortElements(&state.VLANAttachment{HostVeth: "pw1234", MAC: "02:00:00:00:12:34", PortCheck: true, Tagged: []uint16{200}}, "ns/pod")},
		{"portcheck-vrrp", vlanbridge.PortCheckTable([]string{"eth1"}), vrrpPortElements()},
		{"probe-azure", probe(`{"type":"podwire","probeSNAT":{"preset":"azure"}}`, up, 0), nil},
		{"probe-custom-ipv4", probe(`{"type":"podwire","probeSNAT":{"rules":[{"from":"168.63.129.16","to":"10.0.0.250"}]}}`, up, 0), nil},
		{"probe-custom-ipv6", probe(`{"type":"podwire","probeSNAT":{"interfaces":["eth1"],"rules":[{"from":"fe80::1","to":"2001:db8::1"},{"from":"fe80::2","to":"2001:db8::2"}]}}`,
			nodetables.Env{Uplinks6: []string{"eth1"}}, 0), nil},
		{"egress-v4", e4, el4},
		{"egress-v6", e6, el6},
		{"egress-dual", eDual, elDual},
		{"transit", transit.Table(), transitElements()},
	}
}

// vrrpPortElements are the port check elements of a checked pod granted
// VRRP group 7 and no address of its own: its virtual address is its only
// one (one element a set: nft(8) lists several in hash order, on lines of
// its own).
func vrrpPortElements() nft.Elements {
	return vlanbridge.PortElements(&state.VLANAttachment{HostVeth: "pw1234", MAC: "02:00:00:00:12:34", PortCheck: true,
		VRRP: []vrrp.Group{{VRID: 7, VIPs: addrs("192.0.2.100")}}}, "ns/router")
}

// transitElements are the transit elements of a routed forwarding pod with
// a route per family, and of a bridged one (its route only).
func transitElements() nft.Elements {
	e := nft.Elements{}
	transit.AddElements(e, transit.Pod{HostIfName: "veth1234", Addresses: addrs("10.244.1.2", "fd00:244::2"),
		Routes: prefixes("198.51.100.0/24", "2001:db8:100::/64"), Name: "nf/router"})
	transit.AddElements(e, transit.Pod{HostIfName: "veth5678", Bridged: true, Addresses: addrs("10.244.1.3"),
		Routes: prefixes("198.51.101.0/25"), Name: "nf/bridged"})
	return e
}

// TestGolden compares each shape's text with testdata/NAME.nft (rewrite
// them with -update); TestKernelListsText proves the text is what the
// kernel holds.
func TestGolden(t *testing.T) {
	for _, s := range shapes(t) {
		golden(t, filepath.Join("testdata", s.name+".nft"), s.table.Text(s.elems[s.table.ID()]))
	}
}

// golden compares got with the file at path, or rewrites it with -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// TestHashFollowsText: the hash changes with what the kernel would hold, and
// only with it.
func TestHashFollowsText(t *testing.T) {
	seen := map[string]string{}
	for _, s := range shapes(t) {
		h := s.table.Hash()
		if other, ok := seen[h]; ok && s.table.Text(nil) != findShape(t, other).table.Text(nil) {
			t.Errorf("%s and %s: different tables, same hash %s", s.name, other, h)
		}
		seen[h] = s.name
		if h != s.table.Hash() {
			t.Errorf("%s: hash not stable", s.name)
		}
	}
	if sourcecheck.Table().Hash() == vlanbridge.PortCheckTable([]string{"eth1"}).Hash() {
		t.Error("source check and port check share a hash")
	}
}

func findShape(t *testing.T, name string) shape {
	for _, s := range shapes(t) {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no shape %s", name)
	return shape{}
}

var _ = nftables.TableFamilyINet
