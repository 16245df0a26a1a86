// Package primary finds, for a chained invocation, what the primary plugin
// (ptp, flannel, Calico, Cilium's generic-veth chaining, ...) made: the pod's
// addresses and the host side of its veth.
package primary

import (
	"errors"
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
	// Bridge is the Linux bridge HostIfName is a port of (flannel's cni0,
	// the reference bridge plugin), "" for a routed veth (ptp, Calico,
	// Cilium's generic-veth chaining, kindnet). Set by PortOf.
	Bridge string
	// Unchecked says why podwire cannot check the pod's source addresses
	// at the node, "" when it can: a primary with no host interface
	// (macvlan, ipvlan, an SR-IOV VF), or a host interface whose frames
	// pass no netfilter hook that shows it (an Open vSwitch port).
	Unchecked string
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
	var nv *NotVethError
	if errors.As(err, &nv) {
		a.Unchecked = fmt.Sprintf("pod interface %q is a %s: no host interface to check its sources at", nv.IfName, nv.Type)
		return a, nil
	}
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
			return &NotVethError{IfName: ifName, Type: link.Type()}
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

// NotVethError is VethPeer's answer for a pod interface that is not a veth
// (a macvlan, ipvlan or SR-IOV VF primary): it has no host side.
type NotVethError struct{ IfName, Type string }

func (e *NotVethError) Error() string {
	return fmt.Sprintf("pod interface %q is a %s, not a veth", e.IfName, e.Type)
}

// PortOf fills a.Bridge and a.Unchecked from the master of a.HostIfName in
// the current (node) netns: a Linux bridge makes the pod bridged, an Open
// vSwitch datapath unchecked, no master (or another kind, such as a VRF,
// whose slaves are seen at the IP layer) routed.
func PortOf(a *Attachment) error {
	if a.HostIfName == "" {
		return nil
	}
	host, err := netlinksafe.LinkByName(a.HostIfName)
	if err != nil {
		return fmt.Errorf("failed to find host interface %q of the pod: %w", a.HostIfName, err)
	}
	idx := host.Attrs().MasterIndex
	if idx == 0 {
		return nil
	}
	master, err := netlink.LinkByIndex(idx)
	if err != nil {
		return fmt.Errorf("failed to find the master (index %d) of host interface %q: %w", idx, a.HostIfName, err)
	}
	switch master.Type() {
	case "bridge":
		a.Bridge = master.Attrs().Name
	case "openvswitch":
		a.Unchecked = fmt.Sprintf("host interface %q is a port of Open vSwitch datapath %q: its frames pass no netfilter hook that names the port", a.HostIfName, master.Attrs().Name)
	}
	return nil
}
