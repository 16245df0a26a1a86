// Package sourcecheck describes podwire's source-IP verification as
// nftables data: table "inet podwire", one base chain at prerouting
// (filter, priority raw, -300), and dynamic sets holding, per pod, its host
// interface and the addresses it may send from.
//
// Why this shape: the per-packet cost must not grow with the number of pods,
// so there is no rule per pod. A packet from an interface that is not in the
// "checked" set (the node's uplinks, forwarding pods, interfaces of other
// plugins) costs one lookup and is accepted. A packet from a checked
// interface is accepted when "iifname . saddr" is in the pod set or in the
// allowed-prefix interval set of its family; else it is dropped (counted).
// IPv6 link-local (fe80::/10) and unspecified (::, DAD, RFC 4862 5.4) sources
// stay allowed, since neighbour discovery needs them.
//
// Limits: only IPv4 and IPv6 are checked (ARP is not IP and never reaches an
// inet chain); the check sits before conntrack (raw priority), so a spoofed
// packet creates no conntrack entry.
package sourcecheck

import (
	"net/netip"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
)

// Names of the table, its chain and sets.
const (
	tableName  = "podwire"
	chainName  = "filter-prerouting"
	setPodV4   = "pod-v4"
	setPodV6   = "pod-v6"
	setAllowV4 = "allowed-v4"
	setAllowV6 = "allowed-v6"
	// maxComment bounds an element comment (the kernel allows 256 bytes
	// of userdata per element).
	maxComment = 200
)

// Comment is name cut to what an element comment may hold (maxComment).
func Comment(name string) string {
	if len(name) > maxComment {
		return name[:maxComment]
	}
	return name
}

// ID is the table's identity, "inet podwire".
var ID = nft.ID{Family: nftables.TableFamilyINet, Name: tableName}

// Table describes "inet podwire": the sets and the static prerouting chain.
func Table() *nft.Table {
	return &nft.Table{
		Family: nftables.TableFamilyINet,
		Name:   tableName,
		Sets: []nft.Set{
			CheckedSet("host interfaces of checked pods"),
			IfSet(setPodV4, nft.TypeIPv4Addr, false, "pod host interface . own IPv4 address"),
			IfSet(setPodV6, nft.TypeIPv6Addr, false, "pod host interface . own IPv6 address"),
			IfSet(setAllowV4, nft.TypeIPv4Addr, true, "pod host interface . allowed IPv4 prefix"),
			IfSet(setAllowV6, nft.TypeIPv6Addr, true, "pod host interface . allowed IPv6 prefix"),
		},
		Chains: []nft.Chain{{
			Name:     chainName,
			Type:     nftables.ChainTypeFilter,
			Hook:     nftables.ChainHookPrerouting,
			Priority: nftables.ChainPriorityRaw,
			Rules:    rules(),
		}},
	}
}

// Pod is what the source check knows of one attachment.
type Pod struct {
	// HostIfName is the node side of the pod's interface.
	HostIfName string
	// Addresses are the pod's own addresses.
	Addresses []netip.Addr
	// AllowedPrefixes are extra source prefixes
	// (podwire.io/allowed-source-prefixes).
	AllowedPrefixes []netip.Prefix
	// Name names the pod in element comments ("namespace/name" or the
	// container ID).
	Name string
	// Bridged is true when HostIfName is a port of a Linux bridge: its
	// elements go into "bridge podwire" (BridgeTable) instead.
	Bridged bool
}

// Elements are the set elements of one checked pod: its interface in
// "checked", one "ifname . addr" element per address, one interval per
// allowed prefix (prefixes inside another one are left out: the kernel's
// concatenated interval sets refuse overlaps).
func Elements(p Pod) nft.Elements {
	e := nft.Elements{}
	AddElements(e, p)
	return e
}

// AddElements adds the set elements of Elements(p) to e (a rebuild of the
// node tables gathers every pod's into one).
func AddElements(e nft.Elements, p Pod) {
	if p.HostIfName == "" {
		return
	}
	comment := Comment(p.Name)
	ifKey := nft.IfNameKey(p.HostIfName)
	id := ID
	if p.Bridged {
		id = BridgeID
	}
	e.Add(id, SetChecked, CheckedElement(p.HostIfName, comment))
	for _, a := range p.Addresses {
		set := setPodV4
		if a.Unmap().Is6() {
			set = setPodV6
		}
		e.Add(id, set, AddrElement(p.HostIfName, a, comment))
	}
	for _, pfx := range Outermost(p.AllowedPrefixes) {
		first, last := nft.PrefixRange(pfx)
		set := setAllowV4
		if first.Is6() {
			set = setAllowV6
		}
		e.Add(id, set, nftables.SetElement{
			Key:     nft.Concat(ifKey, nft.AddrKey(first)),
			KeyEnd:  nft.Concat(ifKey, nft.AddrKey(last)),
			Comment: comment,
		})
	}
}

// Outermost returns the prefixes of ps (canonical, duplicates removed) that
// lie inside no other prefix of ps, in their original order.
func Outermost(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i, p := range ps {
		p = p.Masked()
		inner := false
		for j, q := range ps {
			q = q.Masked()
			if i == j || p.Addr().Is4() != q.Addr().Is4() || !q.Contains(p.Addr()) || q.Bits() > p.Bits() {
				continue
			}
			// q contains p; keep the first of equal prefixes.
			if q.Bits() < p.Bits() || j < i {
				inner = true
				break
			}
		}
		if !inner {
			out = append(out, p)
		}
	}
	return out
}
