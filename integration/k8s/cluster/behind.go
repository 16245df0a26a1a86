package cluster

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/internal/testns"
)

// NetworkBehind makes a network behind a pod, as a router pod has one (a
// VPN's clients, a site behind a gateway): a new netns wired to the pod's
// netns (podNetNS, a path) by a veth pair, "client0" on the pod's side with
// the gateways (one prefix per family, e.g. 198.51.100.1/24), "eth0" in the
// new netns with the hosts (198.51.100.2/24) and default routes via the
// gateways. It returns the new netns's path and its release, which the
// caller runs when done.
func NetworkBehind(podNetNS string, gateways, hosts []netip.Prefix) (path string, release func(), err error) {
	if len(gateways) != len(hosts) {
		return "", nil, fmt.Errorf("%d gateways for %d hosts", len(gateways), len(hosts))
	}
	behind, err := testns.Make()
	if err != nil {
		return "", nil, err
	}
	// The holder's mount namespace may still pin the bind mount: Release
	// detaches it lazily then, so no netns is left behind.
	release = func() { testns.Release(behind) }
	if err := ns.WithNetNSPath(podNetNS, func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "client0"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(behind.Fd()))}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		return addrsUp("client0", gateways)
	}); err != nil {
		release()
		return "", nil, fmt.Errorf("failed to wire a network behind the pod's netns %s: %w", podNetNS, err)
	}
	if err := behind.Do(func(ns.NetNS) error {
		if err := addrsUp("eth0", hosts); err != nil {
			return err
		}
		l, err := netlinksafe.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, gw := range gateways {
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.IP(gw.Addr().AsSlice())}); err != nil {
				return fmt.Errorf("default route via %s: %w", gw.Addr(), err)
			}
		}
		return nil
	}); err != nil {
		release()
		return "", nil, fmt.Errorf("failed to set up the network behind the pod: %w", err)
	}
	return behind.Path(), release, nil
}

// addrsUp adds the prefixes to link (IPv6 without DAD: the run's
// addresses are unique) and sets it up.
func addrsUp(link string, ps []netip.Prefix) error {
	l, err := netlinksafe.LinkByName(link)
	if err != nil {
		return err
	}
	for _, p := range ps {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(l, a); err != nil {
			return fmt.Errorf("failed to add %s to %s: %w", p, link, err)
		}
	}
	return netlink.LinkSetUp(l)
}
