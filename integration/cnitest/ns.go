package cnitest

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
)

// LinkUp sets the link name up in the calling thread's netns.
func LinkUp(name string) error {
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return fmt.Errorf("failed to find %q: %w", name, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("failed to set %q up: %w", name, err)
	}
	return nil
}

// Sysctls sets each key to its value inside n.
func Sysctls(n ns.NetNS, kv ...[2]string) error {
	return n.Do(func(ns.NetNS) error {
		for _, p := range kv {
			if _, err := sysctl.Sysctl(p[0], p[1]); err != nil {
				return fmt.Errorf("sysctl %s=%s in %s: %w", p[0], p[1], n.Path(), err)
			}
		}
		return nil
	})
}

// RouterSysctls make a node netns forward like a Kubernetes node: IPv4 and
// IPv6 forwarding on, rp_filter off, and no IPv6 DAD (test speed only).
var RouterSysctls = [][2]string{
	{"net.ipv4.ip_forward", "1"},
	{"net.ipv6.conf.all.forwarding", "1"},
	{"net.ipv4.conf.all.rp_filter", "0"},
	{"net.ipv4.conf.default.rp_filter", "0"},
	{"net.ipv6.conf.default.accept_dad", "0"},
}

// NoDAD turns IPv6 duplicate address detection off for links made later in
// a pod netns, so that ptp does not wait a second for addresses to settle
// (test speed only).
var NoDAD = [2]string{"net.ipv6.conf.default.accept_dad", "0"}
