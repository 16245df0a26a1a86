package config

import (
	"net/netip"

	"github.com/podwire/podwire/pkg/vrrp"
)

// validateVRRP parses g.VRRP (vlanGrants[i].vrrp, under key) into g.VRIDs.
// A VRRP grant needs subnets: a pod's virtual addresses must lie inside
// them (and outside exclude), as its vlan-ips do, and the bridge port check
// pins a port of the VLAN to exactly its own and its virtual addresses.
func (g *VLANGrant) validateVRRP(key string) error {
	ids, err := vrrp.ParseIDs(g.VRRP)
	if err != nil {
		return Invalid(key+".vrrp", g.VRRP, "%v", err)
	}
	if len(ids) > 0 && len(g.SubnetPrefixes) == 0 {
		return Invalid(key+".vrrp", g.VRRP, "needs %s.subnets, which bound the virtual addresses", key)
	}
	g.VRIDs = ids
	return nil
}

// PermitsVRRP reports whether g grants virtual router vrid with the virtual
// address vip: vrid in g.VRRP, vip inside g's subnets and outside its
// exclusions.
func (g *VLANGrant) PermitsVRRP(vrid uint8, vip netip.Addr) bool {
	return g.VRIDs.Contains(vrid) && g.Permits(vip)
}
