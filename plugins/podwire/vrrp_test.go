package main

import (
	"net/netip"
	"testing"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/vlanbridge"
	"github.com/podwire/podwire/pkg/vrrp"
)

// vrrpPlanConf grants VLAN 100 with VRIDs 1-20 to the nf-* namespaces.
const vrrpPlanConf = `{"cniVersion":"1.0.0","name":"n","type":"podwire",
	"vlanGrants":[{"vlans":"100","namespaces":["nf-*"],"subnets":["192.0.2.0/24"],"vrrp":"1-20"}],
	"forwarding":{"namespaces":["nf-*"]}}`

// TestPlanVRRP: the granted groups are in the record, and the port's
// elements hold their virtual MACs: alone on a forwarding pod's port (not
// checked), beside the pinned MAC and with the virtual address on an
// ordinary pod's.
func TestPlanVRRP(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		ann                  map[string]string
		checked, macs, addrs int
	}{
		{"forwarding", map[string]string{"podwire.io/forwarding": "true", "podwire.io/vlan": "100", "podwire.io/vrrp": "7=192.0.2.100"}, 0, 1, 0},
		{"ordinary", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.10/24", "podwire.io/vrrp": "7=192.0.2.100"}, 1, 1, 2},
		{"no grant asked", map[string]string{"podwire.io/forwarding": "true", "podwire.io/vlan": "100"}, 0, 0, 0},
	} {
		p, err := planAttachment(planFor(t, vrrpPlanConf, tc.ann, nodeEnv{}))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		v := p.rec.VLAN
		if want := tc.macs; v == nil || len(v.VRRP) != want {
			t.Fatalf("%s: VLAN attachment %+v, want %d VRRP groups", tc.name, v, want)
		}
		sets := p.elems[vlanbridge.PortCheckID]
		if got := [3]int{len(sets[sourcecheck.SetChecked]), len(sets["vrrp-mac"]), len(sets["port-v4"])}; got != [3]int{tc.checked, tc.macs, tc.addrs} {
			t.Errorf("%s: checked, vrrp-mac, port-v4 elements %v, want %v", tc.name, got, [3]int{tc.checked, tc.macs, tc.addrs})
		}
	}
}

// TestPlanVRRPClaims: a VRRP group's virtual address is claimed on its
// VLAN like a static address: another pod of the same group shares it, a
// pod that takes it as its static address or for another VRID is refused,
// so is a pod joining a group (VRID) that another namespace holds, and a
// VRRP pod whose neighbours' claims cannot be read.
func TestPlanVRRPClaims(t *testing.T) {
	a := netip.MustParseAddr
	bridge := config.DefaultBridge
	held := []podmeta.Claim{
		{Key: "c0/eth0", Pod: "nf-a/vr-a", Namespace: "nf-a", Bridge: bridge, PVID: 100, VRRP: []vrrp.Group{{VRID: 7, VIPs: []netip.Addr{a("192.0.2.100")}}}},
		{Key: "c2/eth0", Pod: "nf-a/p0", Namespace: "nf-a", Bridge: bridge, PVID: 100, VLANIPs: []netip.Addr{a("192.0.2.10")}},
		{Key: "c5/eth0", Pod: "nf-b/vr-b", Namespace: "nf-b", Bridge: bridge, PVID: 100, VRRP: []vrrp.Group{{VRID: 9, VIPs: []netip.Addr{a("192.0.2.109")}}}},
	}
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		env     nodeEnv
		mention []string
	}{
		{"same group", map[string]string{"podwire.io/forwarding": "true", "podwire.io/vlan": "100", "podwire.io/vrrp": "7=192.0.2.100"},
			nodeEnv{held: held}, nil},
		{"the static address of another pod", map[string]string{"podwire.io/forwarding": "true", "podwire.io/vlan": "100", "podwire.io/vrrp": "8=192.0.2.10"},
			nodeEnv{held: held}, []string{"podwire.io/vrrp", "192.0.2.10", "nf-a/p0"}},
		{"the virtual address of another VRID", map[string]string{"podwire.io/forwarding": "true", "podwire.io/vlan": "100", "podwire.io/vrrp": "8=192.0.2.100"},
			nodeEnv{held: held}, []string{"podwire.io/vrrp", "192.0.2.100", "VRID 7", "nf-a/vr-a"}},
		{"a static address that is a virtual address", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.100/24"},
			nodeEnv{held: held}, []string{"podwire.io/vlan-ips", "192.0.2.100", "VRID 7", "nf-a/vr-a"}},
		{"the group of another namespace", map[string]string{"podwire.io/forwarding": "true", "podwire.io/vlan": "100", "podwire.io/vrrp": "9=192.0.2.109"},
			nodeEnv{held: held}, []string{"podwire.io/vrrp", "VRID 9", "nf-b/vr-b", "namespace nf-b"}},
		{"records unreadable", map[string]string{"podwire.io/forwarding": "true", "podwire.io/vlan": "100", "podwire.io/vrrp": "7=192.0.2.100"},
			nodeEnv{heldErr: errNoRecords}, []string{"cannot tell"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := planFor(t, vrrpPlanConf, tc.ann, tc.env)
			if !claims(in) {
				t.Fatal("the pod's ADD would not read the other pods' claims")
			}
			checkPlanRefusal(t, in, tc.mention)
		})
	}
}
