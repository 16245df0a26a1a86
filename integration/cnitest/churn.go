package cnitest

import (
	"fmt"
	"net"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ChurnOnce changes the calling thread's netns the way a busy node does, so
// that concurrent netlink dumps there are interrupted (ErrDumpInterrupted):
// it makes the veth pair chrn<i%4>, brings it up, gives it an IPv4 and an
// IPv6 address (10.99.x.1/24, fd99:x::1/64) and a route of each family
// (10.98.x.0/24, fd98:x::/64; x = i%200), then deletes it, its addresses
// and routes going with it. It returns the number of changes it made.
func ChurnOnce(i int) (changes int, err error) {
	name := fmt.Sprintf("chrn%d", i%4)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
		return changes, fmt.Errorf("churn: add %s: %w", name, err)
	}
	changes++
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return changes, fmt.Errorf("churn: %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return changes, fmt.Errorf("churn: up %s: %w", name, err)
	}
	changes++
	x := i % 200
	for _, a := range []string{fmt.Sprintf("10.99.%d.1/24", x), fmt.Sprintf("fd99:%x::1/64", x)} {
		ip, _ := netlink.ParseAddr(a)
		ip.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(l, ip); err != nil {
			return changes, fmt.Errorf("churn: address %s on %s: %w", a, name, err)
		}
		changes++
	}
	for _, d := range []string{fmt.Sprintf("10.98.%d.0/24", x), fmt.Sprintf("fd98:%x::/64", x)} {
		_, dst, _ := net.ParseCIDR(d)
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst}); err != nil {
			return changes, fmt.Errorf("churn: route %s on %s: %w", d, name, err)
		}
		changes++
	}
	if err := netlink.LinkDel(l); err != nil {
		return changes, fmt.Errorf("churn: delete %s: %w", name, err)
	}
	return changes + 1, nil
}

// ChurnBase gives the calling thread's netns pairs idle veth pairs
// (chrnb<n>) and, on the first, addrs /32 and /128 addresses
// (10.99.100.0-10.99.1xx.250, fd99::1000 on: no test uses them), so that
// its link and address dumps span several netlink messages, as on a node
// with many pods, and ChurnOnce interrupts them more often.
func ChurnBase(pairs, addrs int) error {
	for i := range pairs {
		name := fmt.Sprintf("chrnb%d", i)
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
			return fmt.Errorf("base veth %s: %w", name, err)
		}
	}
	l, err := netlinksafe.LinkByName("chrnb0")
	if err != nil {
		return err
	}
	for i := range addrs {
		for _, a := range []string{fmt.Sprintf("10.99.%d.%d/32", 100+i/250, 1+i%250), fmt.Sprintf("fd99::%x/128", 0x1000+i)} {
			ip, err := netlink.ParseAddr(a)
			if err != nil {
				return err
			}
			ip.Flags = unix.IFA_F_NODAD // no DAD on the IPv6 ones
			if err := netlink.AddrAdd(l, ip); err != nil {
				return fmt.Errorf("base address %s: %w", a, err)
			}
		}
	}
	return nil
}
