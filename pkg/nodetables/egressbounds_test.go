package nodetables

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/pkg/config"
)

// TestNodeEgressBounds: an address of the node annotation outside
// egress.allowedCIDRs is never used (its family keeps egress.ips' address,
// or none) and is an error line naming the annotation, the address and the
// key; one inside is used.
func TestNodeEgressBounds(t *testing.T) {
	conf, err := config.Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"podwire","stateDir":"` + t.TempDir() +
		`","egress":{"nodeAnnotation":true,"ips":["203.0.113.10"],"allowedCIDRs":["203.0.113.0/24","2001:db8:e::/48"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	for _, tc := range []struct {
		annotation string
		v4, v6     netip.Addr
		errs       []string // addresses named in error lines
	}{
		{"203.0.113.20,2001:db8:e::20", a("203.0.113.20"), a("2001:db8:e::20"), nil},
		{"198.51.100.7,2001:db8:e::20", a("203.0.113.10"), a("2001:db8:e::20"), []string{"198.51.100.7"}},
		{"203.0.113.20,2001:db8:bad::1", a("203.0.113.20"), netip.Addr{}, []string{"2001:db8:bad::1"}},
	} {
		if _, err := WriteNodeEgress(conf.StateDir, "worker-1", tc.annotation, true, time.Now()); err != nil {
			t.Fatal(err)
		}
		env := ReadEnv(conf)
		if env.Egress4 != tc.v4 || env.Egress6 != tc.v6 {
			t.Errorf("%s: egress IPs %v %v, want %v %v", tc.annotation, env.Egress4, env.Egress6, tc.v4, tc.v6)
		}
		var errs []string
		for _, w := range env.Warnings {
			if strings.HasPrefix(w, "error: ") {
				errs = append(errs, w)
			}
		}
		if len(errs) != len(tc.errs) {
			t.Errorf("%s: error lines %q, want %d", tc.annotation, errs, len(tc.errs))
			continue
		}
		for i, e := range errs {
			for _, m := range []string{tc.errs[i], EgressAnnotation, "egress.allowedCIDRs"} {
				if !strings.Contains(e, m) {
					t.Errorf("%s: %q does not name %s", tc.annotation, e, m)
				}
			}
		}
	}
}
