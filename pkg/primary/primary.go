// Package primary finds, for a chained invocation, what the primary plugin
// (ptp, flannel, Calico, Cilium's generic-veth chaining, ...) made: the pod's
// addresses and the host side of its veth.
package primary

import (
	"fmt"
	"net/netip"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Attachment is the primary plugin's pod interface as seen from the node.
type Attachment struct {
	// HostIfName is the host side of the pod's veth.
	HostIfName string
	// Addresses are the pod's addresses on its primary interface.
	Addresses []netip.Addr
}

// FromResult reads the pod's addresses on ifName from prevResult, and the
// host interface: the result's interface without sandbox when the primary
// plugin reports exactly one (ptp, bridge report theirs), else the veth peer
// of ifName inside netnsPath (IFLA_LINK of the pod's veth is the host side's
// index). It fails when neither gives a host interface.
func FromResult(res *current.Result, ifName, netnsPath string) (*Attachment, error) {
	a := &Attachment{}
	podIdx := -1
	var hostIfs []string
	for i, iface := range res.Interfaces {
		switch {
		case iface.Sandbox != "" && iface.Name == ifName:
			podIdx = i
		case iface.Sandbox == "":
			hostIfs = append(hostIfs, iface.Name)
		}
	}
	for _, ip := range res.IPs {
		if ip.Interface != nil && podIdx >= 0 && *ip.Interface != podIdx {
			continue
		}
		if addr, ok := netip.AddrFromSlice(ip.Address.IP); ok {
			a.Addresses = append(a.Addresses, addr.Unmap())
		}
	}
	if len(hostIfs) == 1 {
		a.HostIfName = hostIfs[0]
		return a, nil
	}
	name, err := VethPeer(netnsPath, ifName)
	if err != nil {
		return nil, err
	}
	a.HostIfName = name
	return a, nil
}

// VethPeer returns the name, in the current (node) netns, of the peer of the
// veth ifName inside netnsPath.
func VethPeer(netnsPath, ifName string) (string, error) {
	var peerIdx int
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		link, err := netlinksafe.LinkByName(ifName)
		if err != nil {
			return fmt.Errorf("failed to find pod interface %q: %w", ifName, err)
		}
		if link.Type() != "veth" {
			return fmt.Errorf("pod interface %q is a %s, not a veth", ifName, link.Type())
		}
		peerIdx = link.Attrs().ParentIndex
		return nil
	})
	if err != nil {
		return "", err
	}
	if peerIdx == 0 {
		return "", fmt.Errorf("pod interface %q has no veth peer index", ifName)
	}
	host, err := netlink.LinkByIndex(peerIdx)
	if err != nil {
		return "", fmt.Errorf("failed to find host veth of %q (index %d): %w", ifName, peerIdx, err)
	}
	return host.Attrs().Name, nil
}
