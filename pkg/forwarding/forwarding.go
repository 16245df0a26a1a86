// Package forwarding turns a pod into a forwarding function (docs/forwarding.md,
// podwire.io/forwarding): IP forwarding on and reverse-path filtering off
// inside its netns, rp_filter off on its host-side interface, and node
// routes to the prefixes it serves (podwire.io/routes).
//
// rp_filter honesty: for IPv4 the kernel applies max(conf/all/rp_filter,
// conf/<iface>/rp_filter) (Documentation/networking/ip-sysctl.rst), so
// setting the host interface to 0 relaxes nothing while
// net.ipv4.conf.all.rp_filter is 1 or 2 on the node. RPFilterWarning says so;
// the remedy is all=0, with podwire's nftables source check keeping ordinary
// pods strictly verified. IPv6 has no rp_filter sysctl.
package forwarding

import (
	"fmt"
	"net/netip"
	"path"

	"github.com/podwire/podwire/pkg/state"
)

// Sysctl keys are paths relative to /proc/sys ("net/ipv4/conf/eth0/rp_filter"):
// unlike the dotted form they stay unambiguous for interface names with a dot
// ("eth0.100").
const (
	KeyIPv4Forward = "net/ipv4/ip_forward"
	KeyIPv6Forward = "net/ipv6/conf/all/forwarding"
	KeyAllRPFilter = "net/ipv4/conf/all/rp_filter"
)

// RPFilterKey is the rp_filter sysctl of an interface ("all", "default" or a
// link name).
func RPFilterKey(ifName string) string {
	return path.Join("net/ipv4/conf", ifName, "rp_filter")
}

// Route is one node route to a pod: Dst via the pod's address Via (same
// family) on the pod's host-side interface Dev. It is the record's type
// (state.Route): what ADD records is what it programs and DEL removes.
type Route = state.Route

// PlanRoutes pairs each prefix with the pod address of its family. It fails,
// naming the prefix, when the pod has no address of that family.
func PlanRoutes(prefixes []netip.Prefix, podAddrs []netip.Addr, hostIf string) ([]Route, error) {
	var out []Route
	for _, p := range prefixes {
		var via netip.Addr
		for _, a := range podAddrs {
			if a.Unmap().Is4() == p.Addr().Is4() {
				via = a.Unmap()
				break
			}
		}
		if !via.IsValid() {
			return nil, fmt.Errorf("no pod address of the family of %s to route it via", p)
		}
		out = append(out, Route{Dst: p.Masked(), Via: via, Dev: hostIf})
	}
	return out, nil
}
