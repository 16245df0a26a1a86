package nodetables

import (
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/podwire/podwire/internal/testns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestDefaultRouteInterfacesAndAssigned reads uplinks and egress IPs in a
// throwaway netns: no default route is none; single and multipath default
// routes name their interfaces; a more specific route does not count; an
// address is assigned only once it is on an interface.
func TestDefaultRouteInterfacesAndAssigned(t *testing.T) {
	netns := testns.New(t)
	err := netns.Do(func(ns.NetNS) error {
		for _, name := range []string{"up0", "up1"} {
			la := netlink.NewLinkAttrs()
			la.Name = name
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: name + "p"}); err != nil {
				return err
			}
			l, _ := netlinksafe.LinkByName(name)
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
			p, _ := netlinksafe.LinkByName(name + "p")
			_ = netlink.LinkSetUp(p)
		}
		up0, _ := netlinksafe.LinkByName("up0")
		up1, _ := netlinksafe.LinkByName("up1")
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			got, err := DefaultRouteInterfaces(fam)
			if err != nil || len(got) != 0 {
				t.Errorf("family %d without default route: %v %v", fam, got, err)
			}
		}
		addr, _ := netlink.ParseAddr("192.0.2.2/24")
		if err := netlink.AddrAdd(up0, addr); err != nil {
			return err
		}
		addr1, _ := netlink.ParseAddr("198.51.100.2/24")
		if err := netlink.AddrAdd(up1, addr1); err != nil {
			return err
		}
		// A specific route first: it must not count as a default route.
		_, specific, _ := net.ParseCIDR("203.0.113.0/24")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: up1.Attrs().Index, Dst: specific, Gw: net.ParseIP("198.51.100.1")}); err != nil {
			return err
		}
		if got, _ := DefaultRouteInterfaces(netlink.FAMILY_V4); len(got) != 0 {
			t.Errorf("specific route counted as default: %v", got)
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: up0.Attrs().Index, Gw: net.ParseIP("192.0.2.1")}); err != nil {
			return err
		}
		if got, err := DefaultRouteInterfaces(netlink.FAMILY_V4); err != nil || !reflect.DeepEqual(got, []string{"up0"}) {
			t.Errorf("single default route: %v %v", got, err)
		}
		_, any4, _ := net.ParseCIDR("0.0.0.0/0")
		if err := netlink.RouteReplace(&netlink.Route{Dst: any4, MultiPath: []*netlink.NexthopInfo{
			{LinkIndex: up0.Attrs().Index, Gw: net.ParseIP("192.0.2.1")},
			{LinkIndex: up1.Attrs().Index, Gw: net.ParseIP("198.51.100.1")},
		}}); err != nil {
			return err
		}
		if got, err := DefaultRouteInterfaces(netlink.FAMILY_V4); err != nil || !reflect.DeepEqual(got, []string{"up0", "up1"}) {
			t.Errorf("multipath default route: %v %v", got, err)
		}
		// A route that covers the FIB-match probe (0.0.0.1) more closely than
		// the default route: the default routes are then read from a dump.
		_, zero8, _ := net.ParseCIDR("0.0.0.0/8")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: up1.Attrs().Index, Dst: zero8, Gw: net.ParseIP("198.51.100.1")}); err != nil {
			return err
		}
		if got, err := DefaultRouteInterfaces(netlink.FAMILY_V4); err != nil || !reflect.DeepEqual(got, []string{"up0", "up1"}) {
			t.Errorf("multipath default route behind 0.0.0.0/8: %v %v", got, err)
		}
		addr6 := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("2001:db8:1::2"), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(up1, addr6); err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: up1.Attrs().Index, Gw: net.ParseIP("2001:db8:1::1")}); err != nil {
			return err
		}
		if got, err := DefaultRouteInterfaces(netlink.FAMILY_V6); err != nil || !reflect.DeepEqual(got, []string{"up1"}) {
			t.Errorf("IPv6 default route: %v %v", got, err)
		}
		// The kernel inserts an IPv6 address's local route from the address
		// configuration work (addrconf_dad_work, net/ipv6/addrconf.c), even
		// with IFA_F_NODAD: wait for it.
		ok, err := false, error(nil)
		for deadline := time.Now().Add(2 * time.Second); !ok && err == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			ok, err = assigned(netip.MustParseAddr("2001:db8:1::2"))
		}
		if !ok || err != nil {
			t.Errorf("assigned IPv6 address not found: %v %v", ok, err)
		}
		if ok, err := assigned(netip.MustParseAddr("192.0.2.2")); !ok || err != nil {
			t.Errorf("assigned address not found: %v %v", ok, err)
		}
		if ok, err := assigned(netip.MustParseAddr("203.0.113.10")); ok || err != nil {
			t.Errorf("unassigned address reported assigned: %v %v", ok, err)
		}
		if ok, err := assigned(netip.MustParseAddr("2001:db8::10")); ok || err != nil {
			t.Errorf("unassigned IPv6 address: %v %v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
