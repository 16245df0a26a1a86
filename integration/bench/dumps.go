package main

import (
	"fmt"
	"net"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// dumpCosts are the wall times (ms, median of dumpReps) of the netlink reads
// podwire's node tables make on every ADD, in a node with a given number of
// pods, and of the constant-cost lookup that could replace the route dump.
type dumpCosts struct {
	routes6, addrs4, addrs6, fibMatch6 float64
	routeCount, addrCount4, addrCount6 int
	fibDev                             string
}

const dumpReps = 15

// probeDumps times, in the node netns, a full IPv6 route dump (what
// nodetables.DefaultRouteInterfaces does), IPv4 and IPv6 address dumps (what
// the egress-IP-assigned check does), and one RTM_GETROUTE with
// RTM_F_FIB_MATCH for the IPv6 default route (one answer, whatever the
// number of pods).
func (n *node) probeDumps() (*dumpCosts, error) {
	d := &dumpCosts{}
	err := n.ns.Do(func(ns.NetNS) error {
		med := func(f func() error) (float64, error) {
			var s samples
			for i := 0; i < dumpReps; i++ {
				t0 := time.Now()
				if err := f(); err != nil {
					return 0, err
				}
				s = append(s, time.Since(t0))
			}
			return s.p50(), nil
		}
		var err error
		if d.routes6, err = med(func() error {
			r, err := netlinksafe.RouteList(nil, netlink.FAMILY_V6)
			d.routeCount = len(r)
			return err
		}); err != nil {
			return err
		}
		if d.addrs4, err = med(func() error {
			a, err := netlinksafe.AddrList(nil, netlink.FAMILY_V4)
			d.addrCount4 = len(a)
			return err
		}); err != nil {
			return err
		}
		if d.addrs6, err = med(func() error {
			a, err := netlinksafe.AddrList(nil, netlink.FAMILY_V6)
			d.addrCount6 = len(a)
			return err
		}); err != nil {
			return err
		}
		d.fibMatch6, err = med(func() error {
			r, err := netlink.RouteGetWithOptions(net.IPv6zero, &netlink.RouteGetOptions{FIBMatch: true})
			if err != nil {
				return err
			}
			if len(r) == 0 {
				return fmt.Errorf("no IPv6 route matches ::")
			}
			if l, err := netlink.LinkByIndex(r[0].LinkIndex); err == nil {
				d.fibDev = l.Attrs().Name
			}
			return nil
		})
		return err
	})
	return d, err
}
