// Package transit is "inet podwire-transit": with forwarding.notrack, the
// traffic a forwarding pod routes for others skips connection tracking, as
// it would pass a plain router. Transit is what neither starts nor ends at
// the pod's own addresses: what the pod sends from another source, and what
// goes to the prefixes the node routes to it (podwire.io/routes). Untracked,
// a flow whose reply returns by another path (asymmetric routing) is not
// dropped as invalid, and transit flows do not fill the conntrack table;
// in exchange nothing stateful applies to them (no NAT: a client behind
// the pod cannot reach a Service's ClusterIP, and egress SNAT and a
// primary's masquerade skip it). Traffic to and from the pod's own
// addresses stays tracked, so Services of the pod itself work.
//
// The chain hooks prerouting at priority raw (-300), ahead of conntrack
// (-200, NF_IP_PRI_CONNTRACK in include/uapi/linux/netfilter_ipv4.h).
package transit

import (
	"net/netip"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/sourcecheck"
)

const (
	tableName = "podwire-transit"
	chainName = "transit"

	setIf       = "transit-if"
	setOwnV4    = "own-v4"
	setOwnV6    = "own-v6"
	setRoutesV4 = "routes-v4"
	setRoutesV6 = "routes-v6"
)

// ID is the table's identity, "inet podwire-transit".
var ID = nft.ID{Family: nftables.TableFamilyINet, Name: tableName}

// Table describes "inet podwire-transit" (golden file
// pkg/nft/testdata/transit.nft):
//
//	iifname @transit-if iifname . ip saddr != @own-v4 notrack
//	iifname @transit-if iifname . ip6 saddr != @own-v6 notrack
//	ip daddr @routes-v4 notrack
//	ip6 daddr @routes-v6 notrack
//
// The first two match on the pod's host interface, so they hold for pods
// of a routing primary (ptp, Calico); a bridge port is not the input
// interface at this hook (the bridge is), so for a bridged forwarding pod
// only the traffic to its routes skips conntrack.
func Table() *nft.Table {
	return &nft.Table{
		Family: nftables.TableFamilyINet,
		Name:   tableName,
		Sets: []nft.Set{
			{Name: setIf, Key: []nft.KeyType{nft.TypeIFName}, Comment: "host interfaces of forwarding pods"},
			sourcecheck.IfSet(setOwnV4, nft.TypeIPv4Addr, false, "forwarding pod interface . own IPv4 address"),
			sourcecheck.IfSet(setOwnV6, nft.TypeIPv6Addr, false, "forwarding pod interface . own IPv6 address"),
			{Name: setRoutesV4, Key: []nft.KeyType{nft.TypeIPv4Addr}, Interval: true, Comment: "IPv4 prefixes routed to forwarding pods"},
			{Name: setRoutesV6, Key: []nft.KeyType{nft.TypeIPv6Addr}, Interval: true, Comment: "IPv6 prefixes routed to forwarding pods"},
		},
		Chains: []nft.Chain{{
			Name:     chainName,
			Type:     nftables.ChainTypeFilter,
			Hook:     nftables.ChainHookPrerouting,
			Priority: nftables.ChainPriorityRaw,
			Rules: []nft.Rule{
				{nft.In(setIf, nft.IIFName), nft.NotIn(setOwnV4, nft.IIFName, nft.IPSaddr), nft.Notrack},
				{nft.In(setIf, nft.IIFName), nft.NotIn(setOwnV6, nft.IIFName, nft.IP6Saddr), nft.Notrack},
				{nft.In(setRoutesV4, nft.IPDaddr), nft.Notrack},
				{nft.In(setRoutesV6, nft.IP6Daddr), nft.Notrack},
			},
		}},
	}
}

// Pod is what the transit table knows of one forwarding attachment.
type Pod struct {
	// HostIfName is the node side of the pod's interface ("" or Bridged:
	// only its routes are matched).
	HostIfName string
	Bridged    bool
	// Addresses are the pod's own addresses; Routes the prefixes the node
	// routes to it.
	Addresses []netip.Addr
	Routes    []netip.Prefix
	// Name names the pod in element comments.
	Name string
}

// AddElements adds p's elements to e.
func AddElements(e nft.Elements, p Pod) {
	comment := sourcecheck.Comment(p.Name)
	if p.HostIfName != "" && !p.Bridged {
		e.Add(ID, setIf, nftables.SetElement{Key: nft.IfNameKey(p.HostIfName), Comment: comment})
		for _, a := range p.Addresses {
			set := setOwnV4
			if a.Unmap().Is6() {
				set = setOwnV6
			}
			e.Add(ID, set, nftables.SetElement{Key: nft.Concat(nft.IfNameKey(p.HostIfName), nft.AddrKey(a.Unmap())), Comment: comment})
		}
	}
	// An interval of a one-field set is a start element and an end
	// element (IntervalEnd) at the first address after it; the gates keep
	// the routes of a node from overlapping (podmeta.CheckClaims).
	for _, r := range p.Routes {
		first, last := nft.PrefixRange(r)
		set := setRoutesV4
		if first.Is6() {
			set = setRoutesV6
		}
		e.Add(ID, set, nftables.SetElement{Key: nft.AddrKey(first), Comment: comment})
		if end := last.Next(); end.IsValid() {
			e.Add(ID, set, nftables.SetElement{Key: nft.AddrKey(end), IntervalEnd: true})
		}
	}
}
