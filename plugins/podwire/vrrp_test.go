package main

import (
	"testing"

	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/vlanbridge"
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
