package forwarding

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
)

// nlRoute is the netlink form of r on link index idx. The gateway is onlink:
// the pod is the other end of the veth, whatever addresses the host side has.
func nlRoute(r Route, idx int) *netlink.Route {
	return &netlink.Route{
		LinkIndex: idx,
		Dst:       &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		Gw:        r.Via.AsSlice(),
		Flags:     int(netlink.FLAG_ONLINK),
		Protocol:  netlink.RouteProtocol(protoPodwire),
	}
}

// protoPodwire marks podwire's routes (rtnetlink protocol, "ip route" shows
// "proto 44"; free in /etc/iproute2/rt_protos).
const protoPodwire = 44

// AddRoutes adds the node routes in the calling thread's netns. A route to
// the same prefix that exists already is an error naming it (another pod or
// the node owns it); routes added before the failure are removed.
func AddRoutes(routes []Route) error {
	for i, r := range routes {
		link, err := netlinksafe.LinkByName(r.Dev)
		if err != nil {
			_ = DelRoutes(routes[:i])
			return fmt.Errorf("failed to find %q for route %s: %w", r.Dev, r, err)
		}
		if err := netlink.RouteAdd(nlRoute(r, link.Attrs().Index)); err != nil {
			_ = DelRoutes(routes[:i])
			if errors.Is(err, syscall.EEXIST) {
				return fmt.Errorf("failed to add route %s: the node already has a route to %s", r, r.Dst)
			}
			return fmt.Errorf("failed to add route %s: %w", r, err)
		}
	}
	return nil
}

// DelRoutes removes the routes; a route or link that is gone is success (DEL
// is idempotent; the primary plugin may have removed the veth, and its
// routes with it).
func DelRoutes(routes []Route) error {
	var errs []error
	for _, r := range routes {
		link, err := netlinksafe.LinkByName(r.Dev)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				continue // veth gone: its routes went with it
			}
			errs = append(errs, fmt.Errorf("failed to find %q for route %s: %w", r.Dev, r, err))
			continue
		}
		err = netlink.RouteDel(nlRoute(r, link.Attrs().Index))
		if err != nil && !errors.Is(err, syscall.ESRCH) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("failed to delete route %s: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// CheckRoutes verifies that each route is present with its gateway and
// device, naming the first one that is not.
func CheckRoutes(routes []Route) error {
	for _, r := range routes {
		link, err := netlinksafe.LinkByName(r.Dev)
		if err != nil {
			return fmt.Errorf("route %s: %w", r, err)
		}
		want := nlRoute(r, link.Attrs().Index)
		family := netlink.FAMILY_V4
		if r.Dst.Addr().Is6() {
			family = netlink.FAMILY_V6
		}
		got, err := netlinksafe.RouteListFiltered(family, &netlink.Route{Dst: want.Dst, LinkIndex: want.LinkIndex},
			netlink.RT_FILTER_DST|netlink.RT_FILTER_OIF)
		if err != nil {
			return fmt.Errorf("failed to list routes to %s: %w", r.Dst, err)
		}
		found := false
		for _, g := range got {
			if g.Gw.Equal(want.Gw) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("route %s is missing", r)
		}
	}
	return nil
}
