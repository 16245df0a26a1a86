package neigh

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
)

// notifySysctls are the per-interface switches of the kernel's own
// announcements (Documentation/networking/ip-sysctl.rst: arp_notify,
// ndisc_notify), as paths under /proc/sys with %s for the interface name
// (slashes, so that a name with a dot works).
var notifySysctls = []string{"net/ipv4/conf/%s/arp_notify", "net/ipv6/conf/%s/ndisc_notify"}

// Announce makes the kernel announce every address of ifName, in the calling
// thread's netns (call it inside ns.Do of the pod's netns): a gratuitous ARP
// per IPv4 address and an unsolicited NA per non-tentative IPv6 address, sent
// before Announce returns. It sets arp_notify and ndisc_notify on ifName
// (an interface without IPv6 has no ndisc_notify: skipped), then sets its MAC
// to its current value, and puts back the permanent neighbour entries of
// ifName that this flushes. ifName must be up.
func Announce(ifName string) error {
	link, err := netlinksafe.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("failed to find %q to announce it: %w", ifName, err)
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		return fmt.Errorf("interface %q is down: nothing to announce", ifName)
	}
	for _, key := range notifySysctls {
		// A plain write: sysctl.Sysctl would read the value back, two more
		// syscalls for nothing.
		key = "/proc/sys/" + fmt.Sprintf(key, ifName)
		if err := os.WriteFile(key, []byte("1"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("failed to set %s: %w", key, err)
		}
	}
	perm, err := permanentNeighbours(link.Attrs().Index)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetHardwareAddr(link, link.Attrs().HardwareAddr); err != nil {
		return fmt.Errorf("failed to set the MAC of %q to %s (its own, to announce it): %w",
			ifName, link.Attrs().HardwareAddr, err)
	}
	var errs []error
	for i := range perm {
		if err := netlink.NeighSet(&perm[i]); err != nil {
			errs = append(errs, fmt.Errorf("failed to restore permanent neighbour %s on %q: %w", perm[i].IP, ifName, err))
		}
	}
	return errors.Join(errs...)
}

// List lists the neighbour entries (both families) of the interface index
// in the current netns. netlinksafe has no NeighList: a dump interrupted by a
// concurrent change (ErrDumpInterrupted) is retried here, 5 times as
// netlinksafe does.
func List(index int) ([]netlink.Neigh, error) {
	var all []netlink.Neigh
	var err error
	for range 5 {
		if all, err = netlink.NeighList(index, netlink.FAMILY_ALL); !errors.Is(err, netlink.ErrDumpInterrupted) { // dump retried
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("failed to list neighbours of interface %d: %w", index, err)
	}
	return all, nil
}

// permanentNeighbours lists the permanent neighbour entries (both families)
// of the interface index.
func permanentNeighbours(index int) ([]netlink.Neigh, error) {
	all, err := List(index)
	if err != nil {
		return nil, err
	}
	var perm []netlink.Neigh
	for _, n := range all {
		if n.State&netlink.NUD_PERMANENT != 0 && n.LinkIndex == index {
			perm = append(perm, n)
		}
	}
	return perm, nil
}

// WaitOperUp waits at most timeout until the interface name in the calling
// thread's netns is operationally up, driven by the kernel's link
// notifications (RTNLGRP_LINK: subscribed before the first read, so no
// change is missed between them), not by polling. For a bridge port up
// means the bridge forwards on it: the link watch work sets the
// operational state and enables the port in one RTNL section
// (linkwatch_do_dev, then NETDEV_CHANGE to br_device_event), and any later
// RTM_SETLINK waits for RTNL.
func WaitOperUp(name string, timeout time.Duration) error {
	updates := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{}); err != nil { // no dump
		return fmt.Errorf("failed to subscribe to link notifications: %w", err)
	}
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return fmt.Errorf("failed to find %q: %w", name, err)
	}
	state := l.Attrs().OperState
	if state == netlink.OperUp {
		return nil
	}
	idx := l.Attrs().Index
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				return fmt.Errorf("link notifications ended while waiting for %q (still %s)", name, state)
			}
			if u.Attrs().Index != idx {
				continue
			}
			if state = u.Attrs().OperState; state == netlink.OperUp {
				return nil
			}
		case <-timer.C:
			return fmt.Errorf("%q is still %s after %s", name, state, timeout)
		}
	}
}
