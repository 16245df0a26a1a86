package forwarding

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ProtoRemote marks the routes the node agent adds toward prefixes that a
// forwarding pod on another node serves ("ip route" shows "proto 45"; free
// in /etc/iproute2/rt_protos). The plugin's own routes to pods on this
// node are protoPodwire (44): the agent reconciles 45 only.
const ProtoRemote = 45

// RemoteRoute is a route of this node toward a prefix served by a
// forwarding pod on another node: Dst via Gw on Dev, the same next hop as
// this node's route to that node's pod CIDR (flannel's vxlan: "via
// 10.244.1.0 dev flannel.1 onlink"; a routed primary: the node's address
// on the uplink).
type RemoteRoute struct {
	Dst  netip.Prefix
	Gw   netip.Addr
	Dev  string
	Node string // the node whose pod serves Dst (for logs)
}

func (r RemoteRoute) String() string {
	return fmt.Sprintf("%s via %s dev %s (node %s)", r.Dst, r.Gw, r.Dev, r.Node)
}

// NextHopTo is this node's next hop toward addr, as the FIB resolves it now
// (RTM_GETROUTE): the gateway ("" when addr is on a link) and the device.
func NextHopTo(addr netip.Addr) (gw netip.Addr, dev string, err error) {
	rs, err := netlink.RouteGet(addr.AsSlice())
	if err != nil {
		return gw, "", fmt.Errorf("no route to %s: %w", addr, err)
	}
	if len(rs) == 0 {
		return gw, "", fmt.Errorf("no route to %s", addr)
	}
	l, err := netlink.LinkByIndex(rs[0].LinkIndex)
	if err != nil {
		return gw, "", fmt.Errorf("route to %s: device %d: %w", addr, rs[0].LinkIndex, err)
	}
	if a, ok := netip.AddrFromSlice(rs[0].Gw); ok {
		gw = a.Unmap()
	}
	return gw, l.Attrs().Name, nil
}

// SyncRemoteRoutes makes this node's ProtoRemote routes (main table, both
// families) exactly want: missing or changed ones are replaced, the others
// deleted. It returns what it changed. A route it cannot add is an error
// naming it; the rest are still synced.
func SyncRemoteRoutes(want []RemoteRoute) (added, deleted []string, err error) {
	var errs []error
	have := map[string]netlink.Route{}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlinksafe.RouteListFiltered(family, &netlink.Route{Protocol: ProtoRemote, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to list the node's remote forwarding routes: %w", err)
		}
		for _, r := range rs {
			if r.Dst != nil {
				have[r.Dst.String()] = r
			}
		}
	}
	keep := map[string]bool{}
	// One lookup per device: the routes toward every other node share a
	// few (flannel's vxlan device, the uplink).
	links := map[string]netlink.Link{}
	for _, w := range want {
		l, ok := links[w.Dev]
		if !ok {
			var err error
			if l, err = netlinksafe.LinkByName(w.Dev); err != nil {
				errs = append(errs, fmt.Errorf("route %s: %w", w, err))
				continue
			}
			links[w.Dev] = l
		}
		nr := &netlink.Route{
			LinkIndex: l.Attrs().Index,
			Dst:       &net.IPNet{IP: w.Dst.Addr().AsSlice(), Mask: net.CIDRMask(w.Dst.Bits(), w.Dst.Addr().BitLen())},
			Protocol:  ProtoRemote,
			Table:     unix.RT_TABLE_MAIN,
		}
		if w.Gw.IsValid() {
			// The gateway is where the FIB sends this node's traffic to
			// the other node's pods: reachable on Dev whatever Dev's
			// addresses (flannel's vxlan gateways are /32s).
			nr.Gw = w.Gw.AsSlice()
			nr.Flags = int(netlink.FLAG_ONLINK)
		}
		key := nr.Dst.String()
		keep[key] = true
		h, ours := have[key]
		if ours && h.LinkIndex == nr.LinkIndex && h.Gw.Equal(nr.Gw) {
			continue
		}
		// Replace only a route of ours: a route to the same prefix
		// that another owner added (the operator, a routing daemon)
		// stays, and this one is an error naming it.
		op := netlink.RouteAdd
		if ours {
			op = netlink.RouteReplace
		}
		if err := op(nr); err != nil {
			if errors.Is(err, syscall.EEXIST) {
				err = errors.New("the node has a route to it that is not podwire's")
			}
			errs = append(errs, fmt.Errorf("failed to add route %s: %w", w, err))
			continue
		}
		added = append(added, w.String())
	}
	for key, h := range have {
		if keep[key] {
			continue
		}
		if err := netlink.RouteDel(&h); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("failed to delete route to %s: %w", key, err))
			continue
		}
		deleted = append(deleted, key)
	}
	slices.Sort(deleted)
	return added, deleted, errors.Join(errs...)
}
