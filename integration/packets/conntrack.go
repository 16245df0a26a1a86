package packets

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// ConntrackFrom counts the IPv4 conntrack entries of netns whose original
// source is src (the dump is retried when a concurrent change interrupts
// it).
func ConntrackFrom(netns ns.NetNS, src netip.Addr) (int, error) {
	k := 0
	err := netns.Do(func(ns.NetNS) error {
		var flows []*netlink.ConntrackFlow
		var err error
		for range 5 {
			flows, err = netlink.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4) // dump retried
			if !errors.Is(err, netlink.ErrDumpInterrupted) {
				break
			}
		}
		if err != nil {
			return err
		}
		for _, f := range flows {
			if a, ok := netip.AddrFromSlice(f.Forward.SrcIP); ok && a.Unmap() == src {
				k++
			}
		}
		return nil
	})
	return k, err
}

// CheckTracked is the verdict on a transit flow from src through the node
// of netns: with notrack the node must hold no conntrack entry from src;
// without it (the control) at least one, or the check proves nothing. The
// error says which failed.
func CheckTracked(netns ns.NetNS, src netip.Addr, notrack bool) error {
	tracked, err := ConntrackFrom(netns, src)
	switch {
	case err != nil:
		return err
	case notrack && tracked > 0:
		return fmt.Errorf("notrack: %d conntrack entries from the client %s: the transit flow was tracked", tracked, src)
	case !notrack && tracked == 0:
		return fmt.Errorf("control: no conntrack entry from the client %s although the node tracks (the check above proves nothing)", src)
	}
	return nil
}

// CheckAsymmetric is the verdict on an asymmetric transit flow (the
// server's replies bypass the node) through a node that drops conntrack's
// INVALID packets, err being its outcome: with notrack it must pass;
// without it (the control) it must fail, or the pass proves nothing.
func CheckAsymmetric(notrack bool, err error) error {
	if notrack && err != nil {
		return fmt.Errorf("notrack: the asymmetric transit flow failed: %w", err)
	}
	if !notrack && err == nil {
		return errors.New("control: the asymmetric transit flow passed a tracking node that drops INVALID (the pass above proves nothing)")
	}
	return nil
}
