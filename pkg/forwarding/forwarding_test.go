package forwarding

import (
	"net/netip"
	"testing"
)

func TestPlanRoutes(t *testing.T) {
	addrs := []netip.Addr{netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("fd00::2")}
	for _, tc := range []struct {
		name    string
		prefix  string
		addrs   []netip.Addr
		via     string
		wantErr bool
	}{
		{"v4", "198.51.100.0/24", addrs, "10.244.1.2", false},
		{"v6", "2001:db8::/64", addrs, "fd00::2", false},
		{"no v6 address", "2001:db8::/64", addrs[:1], "", true},
	} {
		rs, err := PlanRoutes([]netip.Prefix{netip.MustParsePrefix(tc.prefix)}, tc.addrs, "veth1")
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v", tc.name, err)
			continue
		}
		if err == nil && (len(rs) != 1 || rs[0].Via.String() != tc.via || rs[0].Dev != "veth1") {
			t.Errorf("%s: routes %v", tc.name, rs)
		}
	}
}

func TestRPFilterKey(t *testing.T) {
	if got := RPFilterKey("eth0.100"); got != "net/ipv4/conf/eth0.100/rp_filter" {
		t.Errorf("RPFilterKey = %q", got)
	}
}
