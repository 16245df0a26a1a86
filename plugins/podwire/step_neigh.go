package main

import (
	"net/netip"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/pkg/neigh"
)

// neighStep announces the pod's addresses once everything is wired (it is
// the last step): gratuitous ARP for IPv4 and unsolicited NA for IPv6, on
// every result interface in the pod's sandbox (the primary interface and the
// VLAN interface). Best effort: a failure is logged and never fails ADD. It
// makes nothing, so del and check have nothing to do.
type neighStep struct{}

func (neighStep) name() string { return "neigh" }

func (neighStep) plan(*attachment) error { return nil }

func (neighStep) add(a *attachment) error {
	byIf := map[string][]netip.Addr{}
	var order []string
	for _, ip := range a.res.IPs {
		if ip.Interface == nil || *ip.Interface < 0 || *ip.Interface >= len(a.res.Interfaces) {
			continue
		}
		itf := a.res.Interfaces[*ip.Interface]
		if itf.Sandbox == "" || itf.Sandbox != a.args.Netns {
			continue
		}
		addr, ok := netip.AddrFromSlice(ip.Address.IP)
		if !ok {
			continue
		}
		if byIf[itf.Name] == nil {
			order = append(order, itf.Name)
		}
		byIf[itf.Name] = append(byIf[itf.Name], addr.Unmap())
	}
	if len(order) == 0 {
		return nil
	}
	err := ns.WithNetNSPath(a.args.Netns, func(ns.NetNS) error {
		for _, ifName := range order {
			if err := neigh.Announce(ifName, byIf[ifName]); err != nil {
				a.log.Warn("neighbour announcement failed", "ifname", ifName, "error", err)
			}
		}
		return nil
	})
	if err != nil {
		a.log.Warn("neighbour announcements skipped", "netns", a.args.Netns, "error", err)
	}
	return nil
}

// del: announcements leave nothing behind.
func (neighStep) del(*attachment) error { return nil }

func (neighStep) check(*attachment) error { return nil }
