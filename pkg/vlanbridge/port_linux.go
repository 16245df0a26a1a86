package vlanbridge

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Port is one pod's attachment to the bridge.
type Port struct {
	Bridge   string
	HostVeth string
	// Netns is the pod's netns path; PodIfName the pod end's name there.
	Netns     string
	PodIfName string
	// MAC of the pod end; nil leaves the kernel's random one.
	MAC net.HardwareAddr
	// VRRPMACs are the virtual MACs of the pod's VRRP groups (RFC 5798
	// section 7.3): a master may carry one on its interface in place of MAC.
	VRRPMACs []net.HardwareAddr
	VLANs    PortVLANs
	// MTU in bytes of both ends; 0 leaves the kernel default.
	MTU int
	// IPs are static addresses of the pod end (address with prefix length).
	IPs []netip.Prefix
}

// Created is what CreatePort made, for the CNI result and the record.
type Created struct {
	HostMAC, PodMAC string
	// PodIndex is the pod end's ifindex in the pod's netns.
	PodIndex int
}

// CheckNames fails when the host veth name is taken in the current (node)
// netns or the pod interface name is taken in the pod's netns: nothing is
// created and the error names the clash.
func CheckNames(p *Port) error {
	if _, err := netlinksafe.LinkByName(p.HostVeth); err == nil {
		return fmt.Errorf("host interface %q already exists", p.HostVeth)
	}
	return ns.WithNetNSPath(p.Netns, func(ns.NetNS) error {
		if _, err := netlinksafe.LinkByName(p.PodIfName); err == nil {
			return fmt.Errorf("interface %q already exists in the pod's netns %s", p.PodIfName, p.Netns)
		}
		return nil
	})
}

// CreatePort makes the veth pair (host end in the current netns, pod end
// directly in the pod's netns), enslaves the host end to br with exactly the
// port's VLANs, brings both ends up and adds the static addresses. On error
// the caller removes the port with DeletePort.
func CreatePort(br *netlink.Bridge, p *Port) (*Created, error) {
	podNS, err := ns.GetNS(p.Netns)
	if err != nil {
		return nil, fmt.Errorf("failed to open the pod's netns %s: %w", p.Netns, err)
	}
	defer podNS.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.NewLinkAttrs(), PeerName: p.PodIfName, PeerNamespace: netlink.NsFd(int(podNS.Fd()))}
	veth.Name, veth.MTU, veth.PeerHardwareAddr = p.HostVeth, p.MTU, p.MAC
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("failed to create veth %q (pod end %q): %w", p.HostVeth, p.PodIfName, err)
	}
	host, err := netlinksafe.LinkByName(p.HostVeth)
	if err != nil {
		return nil, fmt.Errorf("failed to look up veth %q: %w", p.HostVeth, err)
	}
	if err := netlink.LinkSetMaster(host, br); err != nil {
		return nil, fmt.Errorf("failed to attach %q to bridge %q: %w", p.HostVeth, br.Name, err)
	}
	if err := SetPortVLANs(host, p.VLANs); err != nil {
		return nil, err
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return nil, fmt.Errorf("failed to set %q up: %w", p.HostVeth, err)
	}
	c := &Created{HostMAC: host.Attrs().HardwareAddr.String()}
	err = podNS.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(p.PodIfName)
		if err != nil {
			return fmt.Errorf("failed to look up %q in the pod's netns: %w", p.PodIfName, err)
		}
		c.PodMAC, c.PodIndex = l.Attrs().HardwareAddr.String(), l.Attrs().Index
		for _, ip := range p.IPs {
			a := &netlink.Addr{IPNet: prefixToIPNet(ip)}
			// Static addresses are the operator's: announced at once (gratuitous
			// ARP, unsolicited NA), so no duplicate address detection delay.
			a.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(l, a); err != nil {
				return fmt.Errorf("failed to add %s to %q: %w", ip, p.PodIfName, err)
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("failed to set %q up: %w", p.PodIfName, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// SetPortVLANs gives port exactly the membership v: VLAN 1 (the usual default
// PVID a bridge gives a new port) is removed, the PVID is added untagged,
// tagged VLANs as ranges.
func SetPortVLANs(port netlink.Link, v PortVLANs) error {
	name := port.Attrs().Name
	if err := netlink.BridgeVlanDel(port, 1, false, false, false, true); err != nil && !notFound(err) {
		return fmt.Errorf("failed to remove VLAN 1 from %q: %w", name, err)
	}
	if v.PVID != 0 {
		if err := netlink.BridgeVlanAdd(port, v.PVID, true, true, false, true); err != nil {
			return fmt.Errorf("failed to add VLAN %d (PVID, untagged) to %q: %w", v.PVID, name, err)
		}
	}
	for _, r := range Runs(v.Tagged) {
		if err := addRange(port, r); err != nil {
			return fmt.Errorf("failed to add tagged VLANs %d-%d to %q: %w", r[0], r[1], name, err)
		}
	}
	return nil
}

// ListPortVLANs reads the membership of bridge port index.
func ListPortVLANs(index int) (PortVLANs, error) {
	all, err := netlinksafe.BridgeVlanList()
	if err != nil {
		return PortVLANs{}, fmt.Errorf("failed to list bridge VLANs: %w", err)
	}
	var v PortVLANs
	for _, info := range all[int32(index)] {
		if info.Flags&nl.BRIDGE_VLAN_INFO_PVID != 0 && info.Flags&nl.BRIDGE_VLAN_INFO_UNTAGGED != 0 {
			v.PVID = info.Vid
			continue
		}
		v.Tagged = append(v.Tagged, info.Vid)
	}
	slices.Sort(v.Tagged)
	return v, nil
}

// DeletePort removes the veth pair by its host end. A veth that is gone (its
// pod netns was destroyed, or a DEL ran already) is success.
func DeletePort(hostVeth string) error {
	l, err := netlinksafe.LinkByName(hostVeth)
	if err != nil {
		if notFound(err) {
			return nil // gone with the pod's netns, or deleted before
		}
		return fmt.Errorf("failed to look up veth %q: %w", hostVeth, err)
	}
	if err := netlink.LinkDel(l); err != nil && !notFound(err) {
		return fmt.Errorf("failed to delete veth %q: %w", hostVeth, err)
	}
	return nil
}

// CheckPortNode verifies the node side of the port: the host end enslaved
// to the bridge with exactly its VLANs and MTU.
func CheckPortNode(br *netlink.Bridge, p *Port) error {
	host, err := netlinksafe.LinkByName(p.HostVeth)
	if err != nil {
		return fmt.Errorf("host veth %q: %w", p.HostVeth, err)
	}
	if host.Attrs().MasterIndex != br.Index {
		return fmt.Errorf("host veth %q is not a port of bridge %q", p.HostVeth, br.Name)
	}
	if p.MTU != 0 && host.Attrs().MTU != p.MTU {
		return fmt.Errorf("host veth %q has MTU %d, want %d", p.HostVeth, host.Attrs().MTU, p.MTU)
	}
	have, err := ListPortVLANs(host.Attrs().Index)
	if err != nil {
		return err
	}
	want := PortVLANs{PVID: p.VLANs.PVID, Tagged: slices.Sorted(slices.Values(p.VLANs.Tagged))}
	if !have.Equal(want) {
		return fmt.Errorf("port %q has VLANs pvid=%d tagged=%v, want pvid=%d tagged=%v",
			p.HostVeth, have.PVID, have.Tagged, want.PVID, want.Tagged)
	}
	return nil
}

// CheckPort verifies the node side of the port (CheckPortNode) and its pod
// end in p.Netns: the interface, its MTU, MAC (or a VRRP virtual MAC of its
// groups) and addresses.
func CheckPort(br *netlink.Bridge, p *Port) error {
	if err := CheckPortNode(br, p); err != nil {
		return err
	}
	return ns.WithNetNSPath(p.Netns, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(p.PodIfName)
		if err != nil {
			return fmt.Errorf("pod interface %q: %w", p.PodIfName, err)
		}
		if p.MTU != 0 && l.Attrs().MTU != p.MTU {
			return fmt.Errorf("pod interface %q has MTU %d, want %d", p.PodIfName, l.Attrs().MTU, p.MTU)
		}
		if have := l.Attrs().HardwareAddr; p.MAC != nil && !bytes.Equal(have, p.MAC) &&
			!slices.ContainsFunc(p.VRRPMACs, func(m net.HardwareAddr) bool { return bytes.Equal(have, m) }) {
			if len(p.VRRPMACs) > 0 {
				return fmt.Errorf("pod interface %q has MAC %s, want %s or a virtual MAC of its VRRP groups %v", p.PodIfName, have, p.MAC, p.VRRPMACs)
			}
			return fmt.Errorf("pod interface %q has MAC %s, want %s", p.PodIfName, have, p.MAC)
		}
		addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("failed to list addresses of %q: %w", p.PodIfName, err)
		}
		for _, ip := range p.IPs {
			found := false
			for _, a := range addrs {
				ones, _ := a.Mask.Size()
				if aa, ok := netip.AddrFromSlice(a.IP); ok && aa.Unmap() == ip.Addr() && ones == ip.Bits() {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("pod interface %q lacks address %s", p.PodIfName, ip)
			}
		}
		return nil
	})
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
