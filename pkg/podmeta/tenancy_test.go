package podmeta

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/vlan"
	"github.com/podwire/podwire/pkg/vrrp"
)

// tenancyConf grants VLAN 100 to team-a (subnet, gateway excluded), 101 to
// team-a and team-b (no subnets: MAC-pinned, addresses from elsewhere), and
// keeps VLAN 300 in the deprecated allowedVLANs (every namespace).
const tenancyConf = `{"cniVersion":"1.0.0","name":"n","type":"podwire","allowedVLANs":"300",
	"vlanGrants":[{"vlans":"100","namespaces":["team-a"],"subnets":["192.0.2.0/24","2001:db8:100::/64"],"exclude":["192.0.2.1/32"]},
	              {"vlans":"101","namespaces":["team-a","team-b"]}],
	"forwarding":{"namespaces":["nf-a"],"routablePrefixes":["198.51.100.0/24"],"sourcePrefixes":["10.99.0.0/16","fd99::/48"]}}`

// TestAdmitTenancy: each VLAN only in the namespaces its grant names, with
// addresses inside its subnets; allowed-source-prefixes inside
// forwarding.sourcePrefixes. A refusal is CNI error 7 naming the
// annotation, the value and the gate.
func TestAdmitTenancy(t *testing.T) {
	c, err := config.Parse([]byte(tenancyConf))
	if err != nil {
		t.Fatal(err)
	}
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name    string
		ns      string
		a       Annotations
		mention []string // nil = admitted
	}{
		{"granted VLAN", "team-a", Annotations{VLAN: 100}, nil},
		{"granted VLAN and address", "team-a", Annotations{VLAN: 100, VLANIPs: []netip.Prefix{p("192.0.2.10/24"), p("2001:db8:100::10/64")}}, nil},
		{"VLAN of another team", "team-b", Annotations{VLAN: 100}, []string{AnnotationVLAN, `"100"`, "vlanGrants", "team-b"}},
		{"namespace named like a team", "team-a-x", Annotations{VLAN: 100}, []string{AnnotationVLAN, "vlanGrants"}},
		{"trunk with one foreign VLAN", "team-b", Annotations{VLANTrunk: vlan.Set{100, 101}}, []string{AnnotationVLANTrunk, `"100"`}},
		{"shared VLAN", "team-b", Annotations{VLAN: 101}, nil},
		{"legacy VLAN, any namespace, any address", "default", Annotations{VLAN: 300, VLANIPs: []netip.Prefix{p("203.0.113.7/24")}}, nil},
		{"address outside the subnets", "team-a", Annotations{VLAN: 100, VLANIPs: []netip.Prefix{p("198.51.100.10/24")}},
			[]string{AnnotationVLANIPs, "198.51.100.10/24", "vlanGrants", "192.0.2.0/24"}},
		{"the gateway's address", "team-a", Annotations{VLAN: 100, VLANIPs: []netip.Prefix{p("192.0.2.1/24")}},
			[]string{AnnotationVLANIPs, "192.0.2.1/24", "excluding 192.0.2.1/32"}},
		{"address on a grant without subnets", "team-b", Annotations{VLAN: 101, VLANIPs: []netip.Prefix{p("192.0.2.10/24")}},
			[]string{AnnotationVLANIPs, "no static address"}},
		{"addresses on a granted trunk", "team-a", Annotations{VLANTrunk: vlan.Set{100}, VLANIPs: []netip.Prefix{p("192.0.2.10/24")}},
			[]string{AnnotationVLANIPs, AnnotationVLAN}},
		{"source prefixes inside", "nf-a", Annotations{AllowedSourcePrefixes: []netip.Prefix{p("10.99.1.0/24"), p("fd99:0:0:1::/64")}}, nil},
		{"source prefixes wider", "nf-a", Annotations{AllowedSourcePrefixes: []netip.Prefix{p("10.0.0.0/8")}},
			[]string{AnnotationAllowedPrefixes, "10.0.0.0/8", "forwarding.sourcePrefixes"}},
		{"source prefixes outside namespace", "team-a", Annotations{AllowedSourcePrefixes: []netip.Prefix{p("10.99.1.0/24")}},
			[]string{AnnotationAllowedPrefixes, "10.99.1.0/24", "forwarding.namespaces"}},
	} {
		err := Admit(c, Identity{Namespace: tc.ns, Name: "p"}, &tc.a)
		checkAdmission(t, tc.name, err, tc.mention)
	}
}

// TestAdmitSourcePrefixesUnbounded: without forwarding.sourcePrefixes the
// annotation is refused, naming the key to set.
func TestAdmitSourcePrefixesUnbounded(t *testing.T) {
	c, err := config.Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"podwire","forwarding":{"namespaces":["nf-a"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	err = Admit(c, Identity{Namespace: "nf-a", Name: "p"}, &Annotations{AllowedSourcePrefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")}})
	if err == nil || !strings.Contains(err.Error(), "forwarding.sourcePrefixes") {
		t.Errorf("got %v, want a refusal naming forwarding.sourcePrefixes", err)
	}
}

// TestPinsVLANAddresses: a port is pinned to its addresses (none when it
// asked for none) where the namespace's grant of the VLAN lists subnets.
func TestPinsVLANAddresses(t *testing.T) {
	c, err := config.Parse([]byte(tenancyConf))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns   string
		pvid uint16
		want bool
	}{{"team-a", 100, true}, {"team-a", 101, false}, {"team-b", 100, false}, {"default", 300, false}, {"team-a", 0, false}} {
		if got := PinsVLANAddresses(c, config.Namespace{Name: tc.ns}, tc.pvid); got != tc.want {
			t.Errorf("PinsVLANAddresses(%s, %d) = %v, want %v", tc.ns, tc.pvid, got, tc.want)
		}
	}
}

// TestCheckClaims: an address held on the same bridge and VLAN, and a route
// overlapping another attachment's, are refused naming both pods; the same
// address on another VLAN, disjoint routes and the attachment's own old
// claim are not.
func TestCheckClaims(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	held := []Claim{
		{Key: "c0/eth0", Pod: "team-a/p0", Bridge: "podwire0", PVID: 100, VLANIPs: []netip.Addr{a("192.0.2.10")}},
		{Key: "c1/eth0", Pod: "nf-a/r0", Routes: []netip.Prefix{p("198.51.100.0/24")}},
		{Key: "c9/eth0", Pod: "team-a/me", Bridge: "podwire0", PVID: 100, VLANIPs: []netip.Addr{a("192.0.2.99")}},
		{Key: "c3/eth0", Pod: "team-a/vr-a", Namespace: "team-a", Bridge: "podwire0", PVID: 100, VLANIPs: []netip.Addr{a("192.0.2.20")},
			VRRP: []vrrp.Group{{VRID: 7, VIPs: []netip.Addr{a("192.0.2.100"), a("2001:db8::100")}}}},
	}
	for _, tc := range []struct {
		name    string
		mine    Claim
		mention []string
	}{
		{"free address", Claim{Key: "c9/eth0", Pod: "team-a/me", Bridge: "podwire0", PVID: 100, VLANIPs: []netip.Addr{a("192.0.2.99")}}, nil},
		{"held address", Claim{Key: "c2/eth0", Pod: "team-a/p2", Bridge: "podwire0", PVID: 100, VLANIPs: []netip.Addr{a("192.0.2.10")}},
			[]string{AnnotationVLANIPs, "192.0.2.10", "team-a/p0", "team-a/p2"}},
		{"same address, other VLAN", Claim{Key: "c2/eth0", Pod: "team-a/p2", Bridge: "podwire0", PVID: 101, VLANIPs: []netip.Addr{a("192.0.2.10")}}, nil},
		{"same address, other bridge", Claim{Key: "c2/eth0", Pod: "team-a/p2", Bridge: "br1", PVID: 100, VLANIPs: []netip.Addr{a("192.0.2.10")}}, nil},
		{"equal route", Claim{Key: "c2/eth0", Pod: "nf-a/r1", Routes: []netip.Prefix{p("198.51.100.0/24")}},
			[]string{AnnotationRoutes, "198.51.100.0/24", "nf-a/r0", "nf-a/r1"}},
		{"more specific route", Claim{Key: "c2/eth0", Pod: "nf-a/r1", Routes: []netip.Prefix{p("198.51.100.128/25")}},
			[]string{AnnotationRoutes, "198.51.100.128/25", "198.51.100.0/24", "nf-a/r0"}},
		{"wider route", Claim{Key: "c2/eth0", Pod: "nf-a/r1", Routes: []netip.Prefix{p("198.51.0.0/16")}}, []string{"198.51.0.0/16", "nf-a/r0"}},
		{"disjoint route", Claim{Key: "c2/eth0", Pod: "nf-a/r1", Routes: []netip.Prefix{p("198.51.101.0/24")}}, nil},
		{"another member of the VRRP group", Claim{Key: "c4/eth0", Pod: "team-a/vr-b", Namespace: "team-a", Bridge: "podwire0", PVID: 100,
			VRRP: []vrrp.Group{{VRID: 7, VIPs: []netip.Addr{a("192.0.2.100")}}}}, nil},
		{"a static address that is a virtual address", Claim{Key: "c4/eth0", Pod: "team-a/p4", Bridge: "podwire0", PVID: 100,
			VLANIPs: []netip.Addr{a("192.0.2.100")}}, []string{AnnotationVLANIPs, "192.0.2.100", "VRID 7", "team-a/vr-a", "team-a/p4"}},
		{"a virtual address that is a static address", Claim{Key: "c4/eth0", Pod: "team-a/vr-c", Bridge: "podwire0", PVID: 100,
			VRRP: []vrrp.Group{{VRID: 9, VIPs: []netip.Addr{a("192.0.2.10")}}}}, []string{AnnotationVRRP, "192.0.2.10", "VRID 9", "team-a/p0"}},
		{"a virtual address of another VRID", Claim{Key: "c4/eth0", Pod: "team-a/vr-c", Bridge: "podwire0", PVID: 100,
			VRRP: []vrrp.Group{{VRID: 8, VIPs: []netip.Addr{a("2001:db8::100")}}}}, []string{AnnotationVRRP, "2001:db8::100", "VRID 7", "team-a/vr-a"}},
		{"the VRRP group from another namespace", Claim{Key: "c4/eth0", Pod: "team-b/vr-x", Namespace: "team-b", Bridge: "podwire0", PVID: 100,
			VRRP: []vrrp.Group{{VRID: 7, VIPs: []netip.Addr{a("192.0.2.100")}}}}, []string{AnnotationVRRP, "VRID 7", "team-a/vr-a", "namespace team-a"}},
		{"a virtual address, other VLAN", Claim{Key: "c4/eth0", Pod: "team-a/vr-c", Bridge: "podwire0", PVID: 101,
			VRRP: []vrrp.Group{{VRID: 8, VIPs: []netip.Addr{a("192.0.2.10")}}}}, nil},
	} {
		err := CheckClaims(tc.mine, held)
		if tc.mention == nil {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: admitted", tc.name)
			continue
		}
		for _, m := range tc.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: %q does not mention %s", tc.name, err, m)
			}
		}
	}
}

// TestAdmitVLANByLabels: a vlanGrants entry with a namespaceSelector grants
// its VLAN, and its subnets, to a namespace by its labels; the same name
// without the labels (or with labels not read) is refused; the port of a
// selected namespace's pod is pinned to its addresses.
func TestAdmitVLANByLabels(t *testing.T) {
	c, err := config.Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"podwire",
		"vlanGrants":[{"vlans":"100","namespaceSelector":{"matchLabels":{"team":"a"}},"subnets":["192.0.2.0/24"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	team := map[string]string{"team": "a"}
	addr := []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}
	if err := Admit(c, Identity{Namespace: "a-1", Name: "p", NamespaceLabels: team}, &Annotations{VLAN: 100, VLANIPs: addr}); err != nil {
		t.Errorf("selected namespace refused: %v", err)
	}
	for _, labels := range []map[string]string{nil, {"team": "b"}} {
		err := Admit(c, Identity{Namespace: "a-1", Name: "p", NamespaceLabels: labels}, &Annotations{VLAN: 100})
		if err == nil || !strings.Contains(err.Error(), "vlanGrants") {
			t.Errorf("labels %v: got %v, want a refusal naming vlanGrants", labels, err)
		}
	}
	if !PinsVLANAddresses(c, config.Namespace{Name: "a-1", Labels: team}, 100) {
		t.Error("a selected namespace's port is not pinned to its addresses")
	}
	if !NeedsNamespaceLabels(c, Identity{Namespace: "a-1"}, &Annotations{VLAN: 100}) ||
		NeedsNamespaceLabels(c, Identity{Namespace: "a-1"}, &Annotations{}) {
		t.Error("NeedsNamespaceLabels: want the labels read for a VLAN pod only")
	}
}

// checkAdmission is a gate test's verdict on err, the answer to the case
// name: admitted when mention is nil, else refused with CNI error 7
// naming every string of mention.
func checkAdmission(t *testing.T, name string, err error, mention []string) {
	t.Helper()
	if mention == nil {
		if err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
		return
	}
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig {
		t.Errorf("%s: got %v, want CNI error 7", name, err)
		return
	}
	for _, m := range mention {
		if !strings.Contains(te.Msg, m) {
			t.Errorf("%s: %q does not mention %s", name, te.Msg, m)
		}
	}
}

// TestClaimWire: a record's claim goes through the agent's wire form and
// back unchanged but for the bridge (a VLAN is one segment across nodes);
// a claim the wire cannot carry is an error.
func TestClaimWire(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	c := Claim{Key: "c1/net1", Pod: "nf-a/r", Namespace: "nf-a", Bridge: "podwire0", PVID: 100,
		VLANIPs: []netip.Addr{a("192.0.2.10"), a("2001:db8::10")},
		VRRP:    []vrrp.Group{{VRID: 7, VIPs: []netip.Addr{a("192.0.2.100"), a("2001:db8::100")}}, {VRID: 8, VIPs: []netip.Addr{a("192.0.2.101")}}},
		Routes:  []netip.Prefix{p("198.51.100.0/24")}}
	got, err := ClaimOfWire(c.Key, c.Pod, c.Namespace, c.Wire())
	if err != nil {
		t.Fatal(err)
	}
	want := c
	want.Bridge = ""
	if got.String() != want.String() || got.Namespace != want.Namespace {
		t.Errorf("round trip: %s, want %s", got, want)
	}
	if (Claim{Bridge: "podwire0", VLANIPs: []netip.Addr{a("192.0.2.10")}}).Wire() != nil {
		t.Error("an address without an access VLAN is claimed")
	}
	for _, bad := range [][]agentapi.Claim{
		{{Kind: "prefix", Value: "198.51.100.0/24"}},
		{{Kind: agentapi.ClaimAddress, Value: "192.0.2.10"}},
		{{Kind: agentapi.ClaimVIP, Value: "192.0.2.10", VLAN: 100}},
		{{Kind: agentapi.ClaimAddress, Value: "192.0.2.10", VLAN: 100}, {Kind: agentapi.ClaimAddress, Value: "192.0.2.11", VLAN: 101}},
		{{Kind: agentapi.ClaimRoute, Value: "198.51.100.1"}},
	} {
		if _, err := ClaimOfWire("k", "p", "ns", bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
