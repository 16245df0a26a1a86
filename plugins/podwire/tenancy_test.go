package main

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// tenancyPlanConf grants VLAN 100 to the test pod's namespace (nf-a) with a
// subnet, 101 without subnets, and keeps 300 in the deprecated allowedVLANs.
const tenancyPlanConf = `{"cniVersion":"1.0.0","name":"n","type":"podwire","allowedVLANs":"300",
	"vlanGrants":[{"vlans":"100","namespaces":["nf-a"],"subnets":["192.0.2.0/24"],"exclude":["192.0.2.1/32"]},{"vlans":"101","namespaces":["nf-a"]}],
	"forwarding":{"namespaces":["nf-*"],"routablePrefixes":["198.51.100.0/24"]}}`

// portSets counts the port check's elements by set.
func portSets(p *attachmentPlan) map[string]int {
	out := map[string]int{}
	for set, els := range p.elems[vlanbridge.PortCheckID] {
		out[set] = len(els)
	}
	return out
}

// TestPlanPortCheckEveryVLANPod: every ordinary VLAN pod's port is pinned:
// to its MAC and vlan-ips; to its MAC and no IP source where its grant lists
// subnets and it asked for none; to its MAC alone where podwire gives it no
// address (a grant without subnets, allowedVLANs). Forwarding pods are not.
func TestPlanPortCheckEveryVLANPod(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		check   bool
		macOnly bool
		sets    map[string]int
	}{
		{"static addresses", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.10/24"}, true, false,
			map[string]int{"checked": 1, "port-mac": 1, "port-v4": 1}},
		{"no address, grant with subnets", map[string]string{"podwire.io/vlan": "100"}, true, false,
			map[string]int{"checked": 1, "port-mac": 1}},
		{"no address, grant without subnets", map[string]string{"podwire.io/vlan": "101"}, true, true,
			map[string]int{"checked": 1, "port-mac": 1, "mac-only": 1}},
		{"no address, allowedVLANs", map[string]string{"podwire.io/vlan": "300"}, true, true,
			map[string]int{"checked": 1, "port-mac": 1, "mac-only": 1}},
		{"forwarding pod", map[string]string{"podwire.io/vlan": "100", "podwire.io/forwarding": "true"}, false, false, map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planAttachment(planFor(t, tenancyPlanConf, tc.ann, nodeEnv{hostRPFilter: "1"}))
			if err != nil {
				t.Fatal(err)
			}
			v := p.rec.VLAN
			if v.PortCheck != tc.check || v.PortMACOnly != tc.macOnly {
				t.Errorf("portCheck %v portMACOnly %v, want %v %v", v.PortCheck, v.PortMACOnly, tc.check, tc.macOnly)
			}
			if got := portSets(p); len(got) != len(tc.sets) {
				t.Errorf("port-check elements %v, want %v", got, tc.sets)
			} else {
				for set, n := range tc.sets {
					if got[set] != n {
						t.Errorf("port-check elements %v, want %v", got, tc.sets)
					}
				}
			}
		})
	}
}

// TestPlanClaims: an address another record holds on the same VLAN and a
// route overlapping another record's are refused, naming both pods; the
// pod's own old record is not a conflict; unreadable records refuse.
func TestPlanClaims(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	held := []podmeta.Claim{
		{Key: "c0/eth0", Pod: "nf-a/p0", Bridge: "podwire0", PVID: 100, VLANIPs: []netip.Addr{a("192.0.2.10")}},
		{Key: "c2/eth0", Pod: "nf-b/r0", Routes: []netip.Prefix{p("198.51.100.0/24")}},
		{Key: "c1/eth0", Pod: "nf-a/p1", Bridge: "podwire0", PVID: 100, VLANIPs: []netip.Addr{a("192.0.2.11")}},
	}
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		env     nodeEnv
		mention []string
	}{
		{"address held", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.10/24"}, nodeEnv{held: held},
			[]string{"podwire.io/vlan-ips", "192.0.2.10", "nf-a/p0", "nf-a/p1"}},
		{"own old address", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.11/24"}, nodeEnv{held: held}, nil},
		{"overlapping route", map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": "198.51.100.0/25"}, nodeEnv{held: held, hostRPFilter: "1"},
			[]string{"podwire.io/routes", "198.51.100.0/25", "198.51.100.0/24", "nf-b/r0", "nf-a/p1"}},
		{"records unreadable", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.12/24"},
			nodeEnv{heldErr: errNoRecords}, []string{"cannot tell"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := planFor(t, tenancyPlanConf, tc.ann, tc.env)
			in.pod.Name = "p1"
			checkPlanRefusal(t, in, tc.mention)
		})
	}
}

// checkPlanRefusal plans in: admitted when mention is nil, else refused
// with an error that mentions each of mention.
func checkPlanRefusal(t *testing.T, in *planInput, mention []string) {
	t.Helper()
	_, err := planAttachment(in)
	if mention == nil {
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if err == nil {
		t.Fatal("admitted")
	}
	for _, m := range mention {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%q does not mention %s", err, m)
		}
	}
}

var errNoRecords = errors.New("cannot tell which addresses and routes other pods hold: corrupt record")
