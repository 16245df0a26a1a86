// Package neigh announces a pod's addresses to its link right after wiring,
// so that switches, the bridge and the node learn the pod at once instead of
// on the first flood: a gratuitous ARP per IPv4 address
// (github.com/j-keck/arping) and an unsolicited neighbour advertisement per
// IPv6 address (RFC 4861, 7.2.6: to ff02::1, override flag set, target
// link-layer address option, hop limit 255).
//
// Announcements are best effort: callers log the errors and carry on. The
// functions work in the calling thread's network namespace, so call them
// inside ns.Do of the pod's netns.
package neigh

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// naFlagOverride is the O flag of a neighbour advertisement (RFC 4861, 4.4).
const naFlagOverride = 0x20000000

// optTargetLinkLayerAddr is the NDP option type 2 (RFC 4861, 4.6.1).
const optTargetLinkLayerAddr = 2

// naBody is the ICMPv6 body (after type, code and checksum) of an
// unsolicited neighbour advertisement of target from mac: flags (override
// only: not a router, not solicited), the target, and the target link-layer
// address option. 4 + 16 + 8 bytes.
func naBody(target netip.Addr, mac net.HardwareAddr) []byte {
	b := make([]byte, 4, 28)
	binary.BigEndian.PutUint32(b, naFlagOverride)
	t := target.As16()
	b = append(b, t[:]...)
	// Option length is in units of 8 bytes: type, length and a 6-byte MAC.
	b = append(b, optTargetLinkLayerAddr, 1)
	return append(b, mac...)
}
