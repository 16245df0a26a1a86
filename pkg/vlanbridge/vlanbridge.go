// Package vlanbridge wires pods onto a node bridge with VLAN filtering, the
// Harvester model: one bridge per node, an optional uplink NIC enslaved as a
// trunk, and per pod a veth pair whose bridge port is an access port (PVID,
// untagged) or a trunk (tagged VLAN list).
//
// All link and bridge-VLAN work goes over rtnetlink (vishvananda/netlink) in
// the calling thread's network namespace, which is the node's; the pod end is
// created directly inside the pod's netns. Limits: the package does not hold
// the node lock itself (callers serialise bridge, uplink and uplink-VLAN
// changes), and it never deletes the bridge.
package vlanbridge

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"slices"
)

// Alias is the IFLA_IFALIAS that marks a bridge (and an uplink it enslaved)
// as podwire's: podwire may turn on VLAN filtering only on a bridge it owns.
const Alias = "podwire"

// hostVethPrefix starts every host-side veth podwire makes.
const hostVethPrefix = "pwv"

// HostVethName is the deterministic host-side veth name of an attachment:
// "pwv" and 12 hex digits of SHA-256(containerID "/" ifName), 15 bytes, the
// longest name Linux allows (IFNAMSIZ-1). DEL and GC find the veth from the
// record alone; a repeated ADD for the same attachment gets the same name.
func HostVethName(containerID, ifName string) string {
	sum := sha256.Sum256([]byte(containerID + "/" + ifName))
	return hostVethPrefix + hex.EncodeToString(sum[:6])
}

// PodMAC is the deterministic MAC of an attachment's pod interface: a
// locally administered unicast address (02:...) with 5 bytes of
// SHA-256("mac/" containerID "/" ifName). Known from the record before the
// veth exists, so the bridge port check pins it from the first frame the pod
// sends (its gratuitous ARP) on, and CHECK can compare it.
func PodMAC(containerID, ifName string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("mac/" + containerID + "/" + ifName))
	return net.HardwareAddr{0x02, sum[0], sum[1], sum[2], sum[3], sum[4]}
}

// Runs groups VLAN IDs into inclusive ranges of consecutive IDs, sorted and
// without duplicates, so that a trunk "300-310" is one netlink range request.
func Runs(vids []uint16) [][2]uint16 {
	s := slices.Clone(vids)
	slices.Sort(s)
	s = slices.Compact(s)
	var out [][2]uint16
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		out = append(out, [2]uint16{s[i], s[j]})
		i = j + 1
	}
	return out
}

// PortVLANs is the VLAN membership of one bridge port.
type PortVLANs struct {
	// PVID is the untagged VLAN (access, or native of a trunk); 0 for none.
	PVID uint16
	// Tagged are the tagged VLANs, sorted.
	Tagged []uint16
}

// Equal reports whether p and o have the same membership.
func (p PortVLANs) Equal(o PortVLANs) bool {
	return p.PVID == o.PVID && slices.Equal(p.Tagged, o.Tagged)
}
