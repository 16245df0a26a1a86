// Package vrrp holds what podwire knows of VRRP (RFC 5798): virtual router
// IDs, the virtual MAC a router of a group sends from, and the groups a pod
// is granted (config vlanGrants[].vrrp, annotation podwire.io/vrrp). podwire
// does not speak VRRP: the pods elect their master themselves; podwire only
// lets the granted ports send from the group's virtual MAC and addresses,
// and keeps every other pod off them.
package vrrp

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/podwire/podwire/pkg/vlan"
)

// MinID and MaxID bound a virtual router ID (RFC 5798 5.2.3: 1-255).
const (
	MinID = 1
	MaxID = 255
)

// Virtual MAC prefixes (RFC 5798 7.3): 00:00:5e:00:01:{VRID} for IPv4,
// 00:00:5e:00:02:{VRID} for IPv6; the last byte is the VRID.
var (
	MACPrefix4 = net.HardwareAddr{0x00, 0x00, 0x5e, 0x00, 0x01, 0x00}
	MACPrefix6 = net.HardwareAddr{0x00, 0x00, 0x5e, 0x00, 0x02, 0x00}
)

// MACPrefixBits is the length of both virtual MAC prefixes, in bits.
const MACPrefixBits = 40

// IDs is a sorted list of distinct VRIDs. The zero value is the empty set.
type IDs []uint8

// vrids are VRRP's virtual router IDs, written as VLAN lists are.
var vrids = vlan.IDRange{List: "VRID", ID: "VRID", Min: MinID, Max: MaxID}

// ParseID parses one VRID, decimal digits only.
func ParseID(s string) (uint8, error) {
	n, err := vrids.ParseID(s)
	return uint8(n), err
}

// ParseIDs parses a comma list of VRIDs and inclusive ranges ("1-20,30"),
// the syntax of a VLAN list. An empty string is the empty set.
func ParseIDs(s string) (IDs, error) { return vlan.ParseList[IDs](vrids, s) }

// Contains reports whether id is in s.
func (s IDs) Contains(id uint8) bool {
	_, ok := slices.BinarySearch(s, id)
	return ok
}

// String prints s with ranges, as ParseIDs reads it: "1-20,30".
func (s IDs) String() string {
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(int(s[i])))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// MAC is the virtual MAC of VRID id for IPv6 (v6) or IPv4.
func MAC(id uint8, v6 bool) net.HardwareAddr {
	mac := slices.Clone(MACPrefix4)
	if v6 {
		mac = slices.Clone(MACPrefix6)
	}
	mac[5] = id
	return mac
}

// Group is one virtual router a pod may act as: its VRID and its virtual
// addresses (IPv4, IPv6 or both). Recorded in the pod's attachment record.
type Group struct {
	VRID uint8        `json:"vrid"`
	VIPs []netip.Addr `json:"vips"`
}

// MACs are the virtual MACs of g: the IPv4 one when g has an IPv4 address,
// the IPv6 one when it has an IPv6 address.
func (g Group) MACs() []net.HardwareAddr {
	var v4, v6 bool
	for _, a := range g.VIPs {
		v4 = v4 || a.Unmap().Is4()
		v6 = v6 || !a.Unmap().Is4()
	}
	var out []net.HardwareAddr
	if v4 {
		out = append(out, MAC(g.VRID, false))
	}
	if v6 {
		out = append(out, MAC(g.VRID, true))
	}
	return out
}

func (g Group) String() string {
	vips := make([]string, len(g.VIPs))
	for i, a := range g.VIPs {
		vips[i] = a.String()
	}
	return fmt.Sprintf("%d=%s", g.VRID, strings.Join(vips, ","))
}

// ParseGroups parses the groups of podwire.io/vrrp: "VRID=VIP[,VIP...]",
// several separated by ";" ("7=192.0.2.100,2001:db8::100;8=192.0.2.101").
// A VIP is a plain unicast address; a VRID may appear once and a VIP once.
// maxVIPs bounds the addresses of all groups together.
func ParseGroups(s string, maxVIPs int) ([]Group, error) {
	var out []Group
	seenID := map[uint8]bool{}
	seenVIP := map[netip.Addr]bool{}
	for _, item := range strings.Split(s, ";") {
		id, list, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("group %q is not VRID=VIP[,VIP...]", strings.TrimSpace(item))
		}
		vrid, err := ParseID(id)
		if err != nil {
			return nil, err
		}
		if seenID[vrid] {
			return nil, fmt.Errorf("VRID %d appears twice", vrid)
		}
		seenID[vrid] = true
		g := Group{VRID: vrid}
		for _, v := range strings.Split(list, ",") {
			v = strings.TrimSpace(v)
			a, err := netip.ParseAddr(v)
			if err != nil || a.Zone() != "" || !a.IsGlobalUnicast() && !a.IsPrivate() {
				return nil, fmt.Errorf("VIP %q of VRID %d is not a unicast address", v, vrid)
			}
			a = a.Unmap()
			if seenVIP[a] {
				return nil, fmt.Errorf("VIP %s appears twice", a)
			}
			seenVIP[a] = true
			g.VIPs = append(g.VIPs, a)
		}
		if len(seenVIP) > maxVIPs {
			return nil, fmt.Errorf("has more than %d VIPs", maxVIPs)
		}
		out = append(out, g)
	}
	return out, nil
}
