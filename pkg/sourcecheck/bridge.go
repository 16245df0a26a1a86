package sourcecheck

import (
	"net/netip"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
)

// The source check of pods whose host veth is a port of a Linux bridge
// (flannel's cni0, the reference bridge plugin): table "bridge podwire".
//
// Why a bridge table: a frame from a bridge port reaches the IP layer with
// iifname = the bridge, never the port, so "inet podwire" cannot tell its
// pods apart (and traffic between two pods of one bridge never reaches the
// IP layer at all). The bridge family's prerouting hook sees every frame a
// port sends, with iifname = the port, before the bridge forwards it or
// passes it up. Its priority, filter (-200), is ahead of br_netfilter
// (NF_BR_PRI_BRNF, 0, include/uapi/linux/netfilter_bridge.h), so the check
// holds whether br_netfilter is loaded or not and whatever
// bridge-nf-call-iptables says; podwire changes neither. A bridged pod's
// elements are in this table only: with br_netfilter calling the inet hooks,
// "inet podwire" sees the port, which is not in its "checked" set.
//
// The sets are those of "inet podwire" (same names, same element shapes).
// Besides IPv4 and IPv6 sources the chain checks what a pod claims on the
// shared segment: the ARP sender address (RFC 826) and the target address
// of a neighbour advertisement (RFC 4861 4.4) must be its own, and router
// advertisements and redirects, which only a router sends (RFC 6105, RA
// guard), are dropped. The chain (golden file pkg/nft/testdata/
// sourcecheck-bridge.nft):
//
//	iifname != @checked accept
//	iifname . arp saddr ip @pod-v4 accept
//	arp saddr ip 0.0.0.0 accept
//	icmpv6 type nd-router-advert iifname @checked counter drop
//	icmpv6 type nd-redirect iifname @checked counter drop
//	icmpv6 type nd-neighbor-advert @th,64,128 != fe80::/10 iifname . @th,64,128 != @pod-v6 iifname @checked counter drop
//	iifname . ip saddr @pod-v4 accept
//	iifname . ip saddr @allowed-v4 accept
//	iifname . ip6 saddr @pod-v6 accept
//	iifname . ip6 saddr @allowed-v6 accept
//	ip6 saddr fe80::/10 accept
//	ip6 saddr :: accept
//	iifname @checked counter drop
//
// Limits: link-local addresses are not known to podwire, so a link-local
// source, and an advertisement of a link-local target, is allowed from any
// checked port (as on a routed veth); ARP probes (sender 0.0.0.0, RFC 5227)
// pass; every other ethertype from a checked port is dropped. A pod's
// allowed-source-prefixes widen its IP sources only, not what it may claim
// by ARP or NA.

// BridgeID is the table's identity, "bridge podwire".
var BridgeID = nft.ID{Family: nftables.TableFamilyBridge, Name: tableName}

// BridgeTable describes "bridge podwire": the sets of Table and the static
// chain at the bridge prerouting hook, priority filter (-200).
func BridgeTable() *nft.Table {
	t := Table()
	t.Family = nftables.TableFamilyBridge
	t.Sets[0].Comment = "bridge ports of checked pods"
	t.Chains = []nft.Chain{{
		Name:     chainName,
		Type:     nftables.ChainTypeFilter,
		Hook:     nftables.ChainHookPrerouting,
		Priority: nft.BridgePriorityFilter,
		Rules:    bridgeRules(),
	}}
	return t
}

func bridgeRules() []nft.Rule {
	return append([]nft.Rule{
		Unchecked(),
		Own(setPodV4, nft.ARPSaddrIP),
		{nft.Is(nft.ARPSaddrIP, netip.IPv4Unspecified()), nft.Accept},
		Dropped(nft.IsICMPv6Type(nft.ICMPv6RouterAdvert)),
		Dropped(nft.IsICMPv6Type(nft.ICMPv6Redirect)),
		Dropped(nft.IsICMPv6Type(nft.ICMPv6NeighborAdvert), nft.NotInPrefix(nft.ICMPv6NDTarget, linkLocal),
			nft.NotIn(setPodV6, nft.IIFName, nft.ICMPv6NDTarget)),
		Own(setPodV4, nft.IPSaddr),
		Own(setAllowV4, nft.IPSaddr),
		Own(setPodV6, nft.IP6Saddr),
		Own(setAllowV6, nft.IP6Saddr),
	}, append(NeighbourDiscovery(), DropRest())...)
}
