package nodetables

import (
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

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

// Offsets of the addresses in the network header, and of the IPv4 header
// checksum (RFC 791, RFC 8200).
const (
	ip4SaddrOff  = 12
	ip4DaddrOff  = 16
	ip4CsumOff   = 10
	ip6SaddrOff  = 8
	ip6DaddrOff  = 24
	ip6AddrLen   = 16
	ip4AddrLen   = 4
	priorityRaw  = -300
	ipprotoICMP6 = unix.IPPROTO_ICMPV6
)

// probeSNATTable is the stateless probe rewrite of one family, as AKS deploys
// it for the Azure load balancer's IPv6 health probe
// (table ip6 azureSLBProbe in AKS's node setup):
//
//	table ip6 podwire-probe-snat {
//	  set uplinks { type ifname; elements = { "eth0" } }
//	  chain prerouting {
//	    type filter hook prerouting priority -300;
//	    iifname @uplinks meta l4proto ipv6-icmp icmpv6 type 134-136 accept
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
// Checksums: the address is part of the TCP/UDP/ICMPv6 pseudo-header, so the
// payload write updates the L4 checksum (NFT_PAYLOAD_L4CSUM_PSEUDOHDR), and
// for IPv4 also the header checksum (NFT_PAYLOAD_CSUM_INET at offset 10), as
// nft(8) encodes `ip6 saddr set` and `ip saddr set`.
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
	v6 := family == nftables.TableFamilyIPv6
	ifs := nft.Set{Name: setUplinks, KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian,
		Comment: "interfaces the probe arrives on"}
	for _, name := range uplinks {
		ifs.Elements = append(ifs.Elements, nftables.SetElement{Key: nft.IfNameKey(name)})
	}
	pre := nft.Chain{
		Name: "prerouting", Type: nftables.ChainTypeFilter,
		Hook: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(priorityRaw),
	}
	post := nft.Chain{
		Name: "postrouting", Type: nftables.ChainTypeFilter,
		Hook: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityRef(priorityRaw),
	}
	if v6 {
		pre.Rules = append(pre.Rules, acceptND)
	}
	for _, p := range pairs {
		pre.Rules = append(pre.Rules, rewriteRule(expr.MetaKeyIIFNAME, p.From, p.To, true))
		post.Rules = append(post.Rules, rewriteRule(expr.MetaKeyOIFNAME, p.To, p.From, false))
	}
	return &nft.Table{
		Family: family,
		Name:   probeTable,
		Sets:   []nft.Set{ifs},
		Chains: []nft.Chain{pre, post},
	}
}

// acceptND: iifname @uplinks meta l4proto ipv6-icmp icmpv6 type 134-136 accept.
func acceptND(sets map[string]*nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: nft.Reg1},
		nft.LookupSet(nft.Reg1, sets[setUplinks], false),
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: nft.Reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: nft.Reg1, Data: []byte{ipprotoICMP6}},
		&expr.Payload{DestRegister: nft.Reg1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpGte, Register: nft.Reg1, Data: []byte{icmpv6RouterAdvert}},
		&expr.Cmp{Op: expr.CmpOpLte, Register: nft.Reg1, Data: []byte{icmpv6NeighborAdvert}},
		nft.Accept(),
	}
}

// rewriteRule: {iif,oif}name @uplinks ip[6] {s,d}addr OLD counter ip[6]
// {s,d}addr set NEW, with the checksum updates nft(8) asks for.
func rewriteRule(ifKey expr.MetaKey, old, new netip.Addr, src bool) nft.RuleFunc {
	return func(sets map[string]*nftables.Set) []expr.Any {
		w := addrWrite(old.Is4(), src)
		return []expr.Any{
			&expr.Meta{Key: ifKey, Register: nft.Reg1},
			nft.LookupSet(nft.Reg1, sets[setUplinks], false),
			&expr.Payload{DestRegister: nft.Reg1, Base: expr.PayloadBaseNetworkHeader, Offset: w.Offset, Len: w.Len},
			&expr.Cmp{Op: expr.CmpOpEq, Register: nft.Reg1, Data: old.AsSlice()},
			&expr.Counter{},
			&expr.Immediate{Register: nft.Reg1, Data: new.AsSlice()},
			w,
		}
	}
}

// addrWrite is the payload write of a source or destination address from
// register 1, with the checksum updates nft(8) asks for: IPv4 fixes the
// header checksum (csum_type inet, csum_off 10) and the L4 checksum
// (csum_flags NFT_PAYLOAD_L4CSUM_PSEUDOHDR); IPv6 has no header checksum, so
// nft(8) sends `[ payload write reg 1 => 16b @ network header + 8 csum_type 0
// csum_off 0 csum_flags 0x1 ]`.
//
// google/nftables v0.3.0 cannot send that: expr.Payload marshals CsumFlags
// only when CsumType is not none, so the IPv6 L4 checksum would be left
// stale and the pod would drop the probe (seen only with real checksums: a
// veth peer's CHECKSUM_PARTIAL packets hide it). For IPv6 the write therefore
// asks for csum_type inet with csum_off pointing at the first two bytes of
// the address being written. The kernel (nft_payload_set_eval) sums the old
// and new address first, adjusts those two bytes, updates the L4 checksum,
// and only then stores the new address over them: the header-checksum step
// writes into bytes that are overwritten, and the flag reaches the kernel.
// The encoding does not depend on how a kernel treats csum_flags without a
// csum_type; the integration test proves it with full-checksum packets.
func addrWrite(v4, src bool) *expr.Payload {
	p := &expr.Payload{
		OperationType:  expr.PayloadWrite,
		SourceRegister: nft.Reg1,
		Base:           expr.PayloadBaseNetworkHeader,
		CsumType:       expr.CsumTypeInet,
		CsumFlags:      unix.NFT_PAYLOAD_L4CSUM_PSEUDOHDR,
	}
	switch {
	case v4 && src:
		p.Offset, p.Len = ip4SaddrOff, ip4AddrLen
	case v4:
		p.Offset, p.Len = ip4DaddrOff, ip4AddrLen
	case src:
		p.Offset, p.Len = ip6SaddrOff, ip6AddrLen
	default:
		p.Offset, p.Len = ip6DaddrOff, ip6AddrLen
	}
	if v4 {
		p.CsumOffset = ip4CsumOff
	} else {
		p.CsumOffset = p.Offset // overwritten by the address itself
	}
	return p
}
