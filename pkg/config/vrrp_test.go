package config

import (
	"net/netip"
	"testing"
)

// TestParseVRRPGrant: vlanGrants[].vrrp parses into VRIDs; PermitsVRRP
// needs both the VRID and the address inside the subnets, outside exclude.
func TestParseVRRPGrant(t *testing.T) {
	c, err := Parse(conf(`"vlanGrants":[{"vlans":"100","namespaces":["nf"],"subnets":["192.0.2.0/24","2001:db8:100::/64"],"exclude":["192.0.2.1/32"],"vrrp":"1-20,30"},
		{"vlans":"101","namespaces":["nf"],"subnets":["198.51.100.0/24"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	g, plain := c.VLANGrants[0], c.VLANGrants[1]
	if g.VRIDs.String() != "1-20,30" || len(plain.VRIDs) != 0 {
		t.Fatalf("VRIDs %s and %s", g.VRIDs, plain.VRIDs)
	}
	a := netip.MustParseAddr
	for _, tc := range []struct {
		g    *VLANGrant
		vrid uint8
		vip  string
		want bool
	}{
		{&g, 7, "192.0.2.100", true},
		{&g, 30, "2001:db8:100::100", true},
		{&g, 21, "192.0.2.100", false},       // VRID not granted
		{&g, 7, "192.0.2.1", false},          // excluded
		{&g, 7, "198.51.100.100", false},     // outside the subnets
		{&plain, 7, "198.51.100.100", false}, // no vrrp key
	} {
		if got := tc.g.PermitsVRRP(tc.vrid, a(tc.vip)); got != tc.want {
			t.Errorf("grant %s: PermitsVRRP(%d, %s) = %v, want %v", tc.g.VLANs, tc.vrid, tc.vip, got, tc.want)
		}
	}
}
