package vlanbridge

import (
	"errors"
	"fmt"
	"net"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// CheckUplinkAddresses refuses an uplink that carries a global address:
// enslaving it to the bridge would take that address out of routing and cut
// the node off. Link-local addresses are fine.
func CheckUplinkAddresses(name string) (netlink.Link, error) {
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("uplink %q: %w", name, err)
	}
	addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("failed to list addresses of uplink %q: %w", name, err)
	}
	for _, a := range addrs {
		if isGlobal(a) {
			return nil, fmt.Errorf("uplink %q carries the global address %s: enslaving it to the bridge would cut the node off; "+
				"move the address or configure another \"uplink\"", name, a.IPNet)
		}
	}
	return l, nil
}

func isGlobal(a netlink.Addr) bool {
	ip := a.IP
	return a.Scope == unix.RT_SCOPE_UNIVERSE && !ip.IsLinkLocalUnicast() && !ip.IsLoopback() && !ip.Equal(net.IPv4zero)
}

// EnsureUplink enslaves uplink to br as a trunk: no untagged VLAN, VLANs are
// added per pod by AddUplinkVLANs. An uplink enslaved to another master, or
// with a global address, is refused.
func EnsureUplink(br *netlink.Bridge, uplink string) (netlink.Link, error) {
	l, err := CheckUplinkAddresses(uplink)
	if err != nil {
		return nil, err
	}
	if m := l.Attrs().MasterIndex; m != 0 && m != br.Index {
		return nil, fmt.Errorf("uplink %q is enslaved to another master (index %d), not bridge %q", uplink, m, br.Name)
	}
	if l.Attrs().MasterIndex == 0 {
		if err := netlink.LinkSetMaster(l, br); err != nil {
			return nil, fmt.Errorf("failed to enslave uplink %q to bridge %q: %w", uplink, br.Name, err)
		}
		// A foreign bridge may hand the new port its default PVID: a trunk
		// carries only the VLANs of its pods.
		if err := removeUntagged(l); err != nil {
			return nil, fmt.Errorf("uplink %q: %w", uplink, err)
		}
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("failed to set uplink %q up: %w", uplink, err)
		}
	}
	return l, nil
}

// AddUplinkVLANs adds vids to the uplink as tagged VLANs; adding a VLAN that
// is there is not an error.
func AddUplinkVLANs(uplink string, vids []uint16) error {
	l, err := netlinksafe.LinkByName(uplink)
	if err != nil {
		return fmt.Errorf("uplink %q: %w", uplink, err)
	}
	for _, r := range Runs(vids) {
		if err := addRange(l, r); err != nil {
			return fmt.Errorf("failed to add VLANs %d-%d to uplink %q: %w", r[0], r[1], uplink, err)
		}
	}
	return nil
}

// RemoveUplinkVLANs removes vids from the uplink. A missing uplink or VLAN
// is success: what DEL wants gone is gone.
func RemoveUplinkVLANs(uplink string, vids []uint16) error {
	l, err := netlinksafe.LinkByName(uplink)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil // no uplink: no VLANs on it
		}
		return fmt.Errorf("uplink %q: %w", uplink, err)
	}
	for _, vid := range vids {
		if err := netlink.BridgeVlanDel(l, vid, false, false, false, true); err != nil && !notFound(err) {
			return fmt.Errorf("failed to remove VLAN %d from uplink %q: %w", vid, uplink, err)
		}
	}
	return nil
}

// notFound reports errors that mean "already gone" for links and VLANs.
func notFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV)
}

// removeUntagged removes every untagged VLAN (a bridge's default PVID) from port.
func removeUntagged(port netlink.Link) error {
	v, err := ListPortVLANs(port.Attrs().Index)
	if err != nil {
		return err
	}
	if v.PVID == 0 {
		return nil
	}
	if err := netlink.BridgeVlanDel(port, v.PVID, false, false, false, true); err != nil && !notFound(err) {
		return fmt.Errorf("failed to remove untagged VLAN %d: %w", v.PVID, err)
	}
	return nil
}

// addRange adds the tagged VLANs r[0]..r[1] to port (the kernel refuses a
// range whose ends are equal: one VLAN is a plain add).
func addRange(port netlink.Link, r [2]uint16) error {
	if r[0] == r[1] {
		return netlink.BridgeVlanAdd(port, r[0], false, false, false, true)
	}
	return netlink.BridgeVlanAddRange(port, r[0], r[1], false, false, false, true)
}
