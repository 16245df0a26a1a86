package cnitest

import (
	"net"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/pkg/neigh"
)

// NeighbourMAC is the link-layer address of ip in netns's neighbour table
// on ifName, or nil when it has no entry.
func NeighbourMAC(netns ns.NetNS, ifName string, ip netip.Addr) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := netns.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(ifName)
		if err != nil {
			return err
		}
		list, err := neigh.List(l.Attrs().Index)
		if err != nil {
			return err
		}
		for _, e := range list {
			if a, ok := netip.AddrFromSlice(e.IP); ok && a.Unmap() == ip {
				mac = e.HardwareAddr
			}
		}
		return nil
	})
	return mac, err
}
