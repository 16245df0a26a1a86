package nodetables

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/podwire/podwire/pkg/config"
)

// EgressAnnotation is the node annotation with the node's egress IPs:
// "203.0.113.10,2001:db8::10" (plain addresses, the first of each family is
// used, as for egress.ips).
const EgressAnnotation = "podwire.io/egress-ip"

// WriteNodeEgress records the node's egress annotation in stateDir, where
// the plugin reads it (egress.nodeAnnotation). The node agent is its only
// writer: it calls this whenever the Node's annotations change. found is
// false when the node has no such annotation. Unchanged content is not
// rewritten; changed reports whether the file was written.
func WriteNodeEgress(stateDir, node string, value string, found bool, now time.Time) (changed bool, err error) {
	c := &nodeCache{Node: node, Fetched: now.UTC()}
	if found {
		c.Found, c.Value = true, value
		c.V4, c.V6, c.Warnings = ParseEgressAnnotation(value)
	} else {
		c.Warnings = append(c.Warnings, fmt.Sprintf("egress.nodeAnnotation: node %s has no %s annotation", node, EgressAnnotation))
	}
	if old, err := readCache(stateDir); err == nil && old != nil && old.Node == c.Node && old.Found == c.Found && old.Value == c.Value {
		return false, nil
	}
	return true, writeCache(stateDir, c)
}

// ParseEgressAnnotation parses "203.0.113.10,2001:db8::10": the first IPv4 and
// the first IPv6 global unicast address; anything else (a second address of a
// family, a CIDR, garbage) is skipped with a warning, since a node annotation
// is not the pod's to fix and must not stop every ADD on the node.
func ParseEgressAnnotation(v string) (v4, v6 netip.Addr, warnings []string) {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		a, err := config.ParseAddr(f)
		switch {
		case err != nil:
			warnings = append(warnings, fmt.Sprintf("annotation %s: %q ignored: %v", EgressAnnotation, f, err))
		case !a.IsGlobalUnicast():
			warnings = append(warnings, fmt.Sprintf("annotation %s: %q ignored: not a global unicast address", EgressAnnotation, f))
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !v6.IsValid():
			v6 = a
		default:
			warnings = append(warnings, fmt.Sprintf("annotation %s: %q ignored: only the first egress IP of each family is used", EgressAnnotation, f))
		}
	}
	return v4, v6, warnings
}
