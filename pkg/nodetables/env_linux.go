package nodetables

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/pkg/config"
)

// ReadEnv reads what the tables depend on from the node (the current netns)
// and stateDir, once per invocation: the probe uplinks (one route dump per family with a probe
// pair, only when probeSNAT.interfaces is empty), the egress IPs (the
// cached node annotation, a file read, when egress.nodeAnnotation is on)
// and the cluster's CIDRs (a file read, when egress is on); no API call. It does not fail: what it cannot read becomes a warning, and the
// tables are built without it (a probe table with no uplink matches nothing
// until the next ADD finds one).
func ReadEnv(conf *config.NetConf) Env {
	env := Env{Egress4: conf.EgressV4, Egress6: conf.EgressV6}
	if conf.ProbeSNAT != nil {
		has4, has6 := false, false
		for _, p := range conf.ProbePairs {
			has4, has6 = has4 || p.From.Is4(), has6 || p.From.Is6()
		}
		for _, fam := range []struct {
			has    bool
			family int
			dst    *[]string
			name   string
		}{{has6, netlink.FAMILY_V6, &env.Uplinks6, "IPv6"}, {has4, netlink.FAMILY_V4, &env.Uplinks4, "IPv4"}} {
			if !fam.has {
				continue
			}
			if len(conf.ProbeSNAT.Interfaces) > 0 {
				*fam.dst = slices.Sorted(slices.Values(conf.ProbeSNAT.Interfaces))
				continue
			}
			ifs, err := DefaultRouteInterfaces(fam.family)
			switch {
			case err != nil:
				env.Warnings = append(env.Warnings, fmt.Sprintf("probeSNAT: cannot find the %s uplink: %v", fam.name, err))
			case len(ifs) == 0:
				env.Warnings = append(env.Warnings, fmt.Sprintf(
					"probeSNAT: no %s default route on the node, so no uplink: the %s probe is not rewritten until one appears (or set probeSNAT.interfaces)",
					fam.name, fam.name))
			}
			*fam.dst = ifs
		}
	}
	if conf.EgressEnabled() && conf.Egress.NodeAnnotation {
		c, err := readCache(conf.StateDir)
		switch {
		case err != nil:
			env.Warnings = append(env.Warnings, fmt.Sprintf("egress.nodeAnnotation: %v", err))
			env.NodeEgressErr = types.NewError(types.ErrTryAgainLater, "failed to read the node's egress annotation", err.Error())
		case c == nil:
			env.Warnings = append(env.Warnings, "egress.nodeAnnotation: the node annotation was not read yet")
			env.NodeEgressErr = types.NewError(types.ErrTryAgainLater, fmt.Sprintf(
				"egress.nodeAnnotation: the podwire agent has not written annotation %s of this node into %s yet",
				EgressAnnotation, conf.StateDir), "")
		default:
			v4, v6, refused := boundNodeEgress(conf, c.V4, c.V6)
			if v4.IsValid() {
				env.Egress4 = v4
			}
			if v6.IsValid() {
				env.Egress6 = v6
			}
			env.Warnings = append(env.Warnings, c.Warnings...)
			env.Warnings = append(env.Warnings, refused...)
		}
	}
	if conf.EgressEnabled() {
		c, err := readCluster(conf.StateDir)
		if err != nil {
			env.Warnings = append(env.Warnings, fmt.Sprintf("egress: the cluster's pod CIDRs are not excepted: %v", err))
		}
		env.Cluster = c
	}
	if conf.EgressEnabled() && !env.Egress4.IsValid() && !env.Egress6.IsValid() {
		env.Warnings = append(env.Warnings, "egress: no egress IP (egress.ips empty and no podwire.io/egress-ip annotation): pod traffic is not SNATed by podwire")
	}
	return env
}

// DefaultRouteInterfaces returns the names of the interfaces holding the
// default route of family (netlink.FAMILY_V4 or FAMILY_V6), every nexthop of
// a multipath route included, sorted and without repeats; none when there is
// no default route.
//
// It asks the kernel for the FIB entry that matches a destination only the
// default route covers (RTM_F_FIB_MATCH, `ip route get fibmatch`): one
// round trip whatever the size of the route table (a dump grows with the
// node's pods, one route each). Unlike a dump of the main table it follows
// policy routing rules, as the node's own traffic does. When the matched
// entry is not a default route (a node with a route for 0.0.0.0/8, say) it
// falls back to a dump of the main table.
func DefaultRouteInterfaces(family int) ([]string, error) {
	probe := net.ParseIP("::")
	if family == netlink.FAMILY_V4 {
		probe = net.ParseIP("0.0.0.1") // 0.0.0.0 is refused by RTM_GETROUTE
	}
	routes, err := netlink.RouteGetWithOptions(probe, &netlink.RouteGetOptions{FIBMatch: true})
	if err != nil {
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) || errors.Is(err, unix.ESRCH) {
			return nil, nil // no default route
		}
		return nil, fmt.Errorf("failed to look up the default route: %w", err)
	}
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				return defaultRouteInterfacesByDump(family)
			}
		}
	}
	return routeInterfaces(routes), nil
}

// defaultRouteInterfacesByDump reads the default routes of family from a
// dump of the main table.
func defaultRouteInterfacesByDump(family int) ([]string, error) {
	routes, err := netlinksafe.RouteList(nil, family)
	if err != nil {
		return nil, fmt.Errorf("failed to list routes: %w", err)
	}
	var defaults []netlink.Route
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		defaults = append(defaults, r)
	}
	return routeInterfaces(defaults), nil
}

// routeInterfaces names the output interfaces of unicast routes (not
// blackhole or unreachable), multipath nexthops included.
func routeInterfaces(routes []netlink.Route) []string {
	var idx []int
	for _, r := range routes {
		if r.Type != 0 && r.Type != unix.RTN_UNICAST {
			continue
		}
		if r.LinkIndex > 0 {
			idx = append(idx, r.LinkIndex)
		}
		for _, nh := range r.MultiPath {
			idx = append(idx, nh.LinkIndex)
		}
	}
	var names []string
	for _, i := range idx {
		l, err := netlink.LinkByIndex(i)
		if err != nil {
			continue // vanished since the lookup
		}
		names = append(names, l.Attrs().Name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// EnvWarnings are the findings of the node tables for the log and `podwire
// status` (errors begin with ErrorPrefix), for an Env read by ReadEnv: env's own (a probe without an uplink,
// an unread node annotation, no egress IP) and an egress IP that is not
// assigned to any interface of the current netns (the SNATed traffic's
// answers would not come back): one route lookup per egress IP, whatever the
// number of pods.
func EnvWarnings(env Env) []string {
	out := append([]string(nil), env.Warnings...)
	for _, ip := range []netip.Addr{env.Egress4, env.Egress6} {
		if !ip.IsValid() {
			continue
		}
		ok, err := assigned(ip)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("egress IP %s: cannot look it up on the node: %v", ip, err))
		case !ok:
			out = append(out, fmt.Sprintf("%segress IP %s is not assigned to any interface of the node: answers to SNATed pod traffic will not reach it", ErrorPrefix, ip))
		}
	}
	return out
}

// assigned reports whether ip is an address of the netns: the kernel routes
// it as local (RTN_LOCAL), one lookup instead of an address dump.
func assigned(ip netip.Addr) (bool, error) {
	routes, err := netlink.RouteGet(ip.AsSlice())
	if err != nil {
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
			return false, nil
		}
		return false, err
	}
	for _, r := range routes {
		if r.Type == unix.RTN_LOCAL {
			return true, nil
		}
	}
	return false, nil
}
