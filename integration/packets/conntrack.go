package packets

import (
	"errors"
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
