package sourcecheck

import (
	"net/netip"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
)

// The vocabulary a source check is written in, shared by the inet source
// check (this package) and the bridge port check (pkg/vlanbridge): a set of
// checked interfaces, sets keyed by "interface . address", and rules that
// accept what an unchecked interface sends, what a checked one sends from
// its own addresses, and what neighbour discovery needs, and drop the rest.

// SetChecked names the set of checked interfaces.
const SetChecked = "checked"

// CheckedSet is the set of checked interfaces (ifname keys), with a
// counter per element: the drops of that interface (see Dropped).
func CheckedSet(comment string) nft.Set {
	return nft.Set{Name: SetChecked, Key: []nft.KeyType{nft.TypeIFName}, Counter: true, Comment: comment}
}

// IfSet is a set keyed by "ifname . k" (an interval set when interval).
func IfSet(name string, k nft.KeyType, interval bool, comment string) nft.Set {
	return nft.Set{Name: name, Key: []nft.KeyType{nft.TypeIFName, k}, Interval: interval, Comment: comment}
}

// Unchecked: iifname != @checked accept.
func Unchecked() nft.Rule { return nft.Rule{nft.NotIn(SetChecked, nft.IIFName), nft.Accept} }

// Own: iifname . FIELD @set accept.
func Own(set string, f nft.Field) nft.Rule {
	return nft.Rule{nft.In(set, nft.IIFName, f), nft.Accept}
}

// linkLocal is fe80::/10 (RFC 4291 2.5.6).
var linkLocal = netip.MustParsePrefix("fe80::/10")

// NeighbourDiscovery accepts the IPv6 sources neighbour discovery needs:
// link-local, and unspecified (DAD, RFC 4862 5.4).
func NeighbourDiscovery() []nft.Rule {
	return []nft.Rule{
		{nft.InPrefix(nft.IP6Saddr, linkLocal), nft.Accept},
		{nft.Is(nft.IP6Saddr, netip.IPv6Unspecified()), nft.Accept},
	}
}

// DropRest: iifname @checked counter drop. Every packet that reaches it
// came from a checked interface (Unchecked accepted the others), so the
// lookup always matches: it is there to bump the interface's element
// counter, which makes the drops countable per pod with no rule per pod.
// The inverted lookup of Unchecked counts nothing (the kernel updates an
// element's counter only when a lookup matches it).
func DropRest() nft.Rule { return Dropped() }

// Dropped is a drop counted per interface (in the checked set's element)
// and in total (the rule's counter), after the matches ms.
func Dropped(ms ...nft.Stmt) nft.Rule {
	return append(append(nft.Rule{}, ms...), nft.In(SetChecked, nft.IIFName), nft.Counter, nft.Drop)
}

// Key helpers for the elements of these sets.

// CheckedElement is an interface's element of the checked set.
func CheckedElement(ifname, comment string) nftables.SetElement {
	return nftables.SetElement{Key: nft.IfNameKey(ifname), Comment: comment}
}

// AddrElement is an "ifname . address" element.
func AddrElement(ifname string, a netip.Addr, comment string) nftables.SetElement {
	return nftables.SetElement{Key: nft.Concat(nft.IfNameKey(ifname), nft.AddrKey(a.Unmap())), Comment: comment}
}

// rules is the static chain of inet podwire, in order:
//
//	iifname != @checked accept
//	iifname . ip saddr @pod-v4 accept
//	iifname . ip saddr @allowed-v4 accept
//	iifname . ip6 saddr @pod-v6 accept
//	iifname . ip6 saddr @allowed-v6 accept
//	ip6 saddr fe80::/10 accept
//	ip6 saddr :: accept
//	iifname @checked counter drop
//
// (the golden file testdata/sourcecheck.nft is the whole table).
func rules() []nft.Rule {
	return append([]nft.Rule{
		Unchecked(),
		Own(setPodV4, nft.IPSaddr),
		Own(setAllowV4, nft.IPSaddr),
		Own(setPodV6, nft.IP6Saddr),
		Own(setAllowV6, nft.IP6Saddr),
	}, append(NeighbourDiscovery(), DropRest())...)
}
