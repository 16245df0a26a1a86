package nodetables

import (
	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
)

// setUplinks holds the interfaces the probe arrives on (ifname keys).
const setUplinks = "uplinks"

// ICMPv6 types accepted untouched before the probe rewrite: router
// advertisement (134), neighbour solicitation (135) and advertisement (136),
// RFC 4861 section 4. They are contiguous, so one range matches them.
const (
	icmpv6RouterAdvert   = 134
	icmpv6NeighborAdvert = 136
)

// probeSNATTable is the stateless probe rewrite of one family, as AKS deploys
// it for the Azure load balancer's IPv6 health probe
// (table ip6 azureSLBProbe in AKS's node setup):
//
//	table ip6 podwire-probe-snat {
//	  set uplinks { type ifname; elements = { "eth0" } }
//	  chain prerouting {
//	    type filter hook prerouting priority -300;
//	    iifname @uplinks icmpv6 type 134-136 accept
//	    iifname @uplinks ip6 saddr FROM counter ip6 saddr set TO
//	  }
//	  chain postrouting {
//	    type filter hook postrouting priority -300;
//	    oifname @uplinks ip6 daddr TO counter ip6 daddr set FROM
//	  }
//	}
//
// Why before routing, at -300: the probe's source is link-local, and the
// kernel refuses to forward a packet with a link-local source (ip6_forward
// answers it with "beyond scope of source address"); rewritten before
// conntrack (-200), the connection is tracked with the global address, and the
// pod's answer is routed to it via the default route and rewritten back on
// the way out. Stateless: no conntrack entry of ours, no NAT.
//
// Why the ND/RA accept: FROM is also the link's router. Its router
// advertisements must keep their link-local source (RFC 4861 6.1.2 drops an
// RA from any other source), and its neighbour solicitations and
// advertisements must keep it for the neighbour cache; without the accept,
// the node's IPv6 default route times out.
//
// Checksums: nft.SetAddr updates the L4 checksum (and the IPv4 header
// checksum), see its doc. Golden files: testdata/probe-*.nft.
func probeSNATTable(conf *config.NetConf, family nftables.TableFamily, uplinks []string) *nft.Table {
	var pairs []config.ProbePair
	for _, p := range conf.ProbePairs {
		if p.From.Is4() == (family == nftables.TableFamilyIPv4) {
			pairs = append(pairs, p)
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	ifs := nft.Set{Name: setUplinks, Key: []nft.KeyType{nft.TypeIFName}, Comment: "interfaces the probe arrives on"}
	for _, name := range uplinks {
		ifs.Elements = append(ifs.Elements, nftables.SetElement{Key: nft.IfNameKey(name)})
	}
	pre := nft.Chain{
		Name: "prerouting", Type: nftables.ChainTypeFilter,
		Hook: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw,
	}
	post := nft.Chain{
		Name: "postrouting", Type: nftables.ChainTypeFilter,
		Hook: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityRaw,
	}
	if family == nftables.TableFamilyIPv6 {
		// iifname @uplinks icmpv6 type 134-136 accept
		pre.Rules = append(pre.Rules, nft.Rule{nft.In(setUplinks, nft.IIFName),
			nft.InRange(nft.ICMPv6Type, icmpv6RouterAdvert, icmpv6NeighborAdvert), nft.Accept})
	}
	for _, p := range pairs {
		// iifname @uplinks ip6 saddr FROM counter ip6 saddr set TO
		pre.Rules = append(pre.Rules, nft.Rule{nft.In(setUplinks, nft.IIFName),
			nft.Is(nft.Saddr(p.From), p.From), nft.Counter, nft.SetAddr(nft.Saddr(p.From), p.To)})
		// oifname @uplinks ip6 daddr TO counter ip6 daddr set FROM
		post.Rules = append(post.Rules, nft.Rule{nft.In(setUplinks, nft.OIFName),
			nft.Is(nft.Daddr(p.To), p.To), nft.Counter, nft.SetAddr(nft.Daddr(p.To), p.From)})
	}
	return &nft.Table{
		Family: family,
		Name:   probeTable,
		Sets:   []nft.Set{ifs},
		Chains: []nft.Chain{pre, post},
	}
}
