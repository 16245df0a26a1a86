package nodetables

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/podwire/podwire/pkg/config"
)

// ErrorPrefix begins a finding of the node tables that is an error, not a
// warning: an egress IP refused by egress.allowedCIDRs, or not assigned on
// the node. The node agent reports those as its errors, with a Node Event.
const ErrorPrefix = "error: "

// Errors are the findings among warnings that are errors, without
// ErrorPrefix.
func Errors(warnings []string) []string {
	var out []string
	for _, w := range warnings {
		if e, ok := strings.CutPrefix(w, ErrorPrefix); ok {
			out = append(out, e)
		}
	}
	return out
}

// boundNodeEgress keeps the egress IPs of the node annotation (v4, v6)
// that lie inside egress.allowedCIDRs and refuses the others: whoever may
// annotate the Node must not choose an address the admin did not allow
// (another node's, a customer's). A refused family keeps egress.ips'
// address, or none. errs name the annotation, the address and the key, for
// the log and `podwire status`.
func boundNodeEgress(conf *config.NetConf, v4, v6 netip.Addr) (ok4, ok6 netip.Addr, errs []string) {
	keep := func(a, fallback netip.Addr) netip.Addr {
		if !a.IsValid() {
			return a
		}
		if config.EgressInside(conf.EgressBounds, a) {
			return a
		}
		use := "no egress IP of this family"
		if fallback.IsValid() {
			use = "egress.ips' " + fallback.String()
		}
		errs = append(errs, fmt.Sprintf(ErrorPrefix+"annotation %s names %s, outside egress.allowedCIDRs %q: refused, %s is used",
			EgressAnnotation, a, conf.Egress.AllowedCIDRs, use))
		return netip.Addr{}
	}
	return keep(v4, conf.EgressV4), keep(v6, conf.EgressV6), errs
}
