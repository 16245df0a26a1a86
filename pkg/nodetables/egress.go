package nodetables

import (
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
)

// Sets of the egress table: pod sources (one element per pod address, added
// at ADD, removed at DEL) and excepted destinations (interval sets from
// egress.exceptCIDRs and the cluster's CIDRs, Env.Cluster).
const (
	setPods4   = "pods4"
	setPods6   = "pods6"
	setExcept4 = "except4"
	setExcept6 = "except6"
)

// egressTableFor is the per-node egress SNAT:
//
//	table inet podwire-egress {
//	  set pods4 { type ipv4_addr }                 # per pod, from records
//	  set pods6 { type ipv6_addr }
//	  set except4 { type ipv4_addr; flags interval } # exceptCIDRs + cluster
//	  set except6 { type ipv6_addr; flags interval }
//	  chain nat-postrouting {
//	    type nat hook postrouting priority srcnat - 1;
//	    ip saddr @pods4 ip daddr != @pods4 ip daddr != @except4 counter snat ip to E4
//	    ip6 saddr @pods6 ip6 daddr != @pods6 ip6 daddr != @except6 counter snat ip6 to E6
//	  }
//	}
//
// (the golden files testdata/egress-*.nft are the exact text).
//
// Why srcnat-1: the kernel runs the NAT chains of a hook in priority order
// and stops at the first that binds the connection, so a masquerade of the
// primary plugin (ptp/bridge ipMasq, flannel, Calico natOutgoing) or of
// kube-proxy at srcnat (100) never sees a connection that leaves through the
// egress IP, and still handles the ones excepted here.
//
// What keeps the pod source: destinations in exceptCIDRs (the operator's:
// the node subnet and whatever else beyond the cluster must see pod
// sources), in the cluster's pod CIDRs and node IPs (Env.Cluster: every
// Node's spec.podCIDRs and InternalIPs, which the node agent keeps current,
// so pod-to-pod traffic across nodes and Service traffic, whose
// destination is a backend pod after kube-proxy's DNAT, keep their source
// without the operator listing them), and pods of this node (daddr in the
// pod set), so pod-to-pod traffic on one node never depends on the config. Only the first
// packet of a connection reaches a NAT chain: answers to connections that
// came in (NodePort, probe, another pod) keep their addresses. Traffic to the
// node's own addresses is delivered locally and never reaches postrouting.
func egressTableFor(conf *config.NetConf, env Env) *nft.Table {
	ex4, ex6 := intervalElements(append(slices.Clone(conf.ExceptCIDRs), env.Cluster.Prefixes()...))
	t := &nft.Table{
		Family: nftables.TableFamilyINet,
		Name:   egressTable,
		Sets: []nft.Set{
			{Name: setPods4, Key: []nft.KeyType{nft.TypeIPv4Addr}, Comment: "pod sources (IPv4)"},
			{Name: setPods6, Key: []nft.KeyType{nft.TypeIPv6Addr}, Comment: "pod sources (IPv6)"},
			{Name: setExcept4, Key: []nft.KeyType{nft.TypeIPv4Addr}, Interval: true, Elements: ex4, Comment: "egress.exceptCIDRs and the cluster's pod CIDRs and node IPs (IPv4)"},
			{Name: setExcept6, Key: []nft.KeyType{nft.TypeIPv6Addr}, Interval: true, Elements: ex6, Comment: "egress.exceptCIDRs and the cluster's pod CIDRs and node IPs (IPv6)"},
		},
	}
	ch := nft.Chain{
		Name: "nat-postrouting", Type: nftables.ChainTypeNAT,
		Hook: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATSource - 1),
	}
	if env.Egress4.IsValid() {
		ch.Rules = append(ch.Rules, snatRule(env.Egress4, setPods4, setExcept4))
	}
	if env.Egress6.IsValid() {
		ch.Rules = append(ch.Rules, snatRule(env.Egress6, setPods6, setExcept6))
	}
	t.Chains = []nft.Chain{ch}
	return t
}

// snatRule: ip saddr @pods ip daddr != @pods ip daddr != @except counter
// snat ip to E (ip6 alike).
func snatRule(e netip.Addr, pods, except string) nft.Rule {
	return nft.Rule{
		nft.In(pods, nft.Saddr(e)),
		nft.NotIn(pods, nft.Daddr(e)),
		nft.NotIn(except, nft.Daddr(e)),
		nft.Counter,
		nft.SNAT(e),
	}
}

// intervalElements turns CIDRs into the elements of an IPv4 and an IPv6
// interval set: overlapping and adjacent prefixes merged (the kernel refuses
// overlapping intervals), each range as a start element and an end element
// one past its last address (none when the range ends at the top of the
// address space), as nft(8) lays out `flags interval` sets.
func intervalElements(cidrs []netip.Prefix) (v4, v6 []nftables.SetElement) {
	type rng struct{ first, last netip.Addr }
	var rs []rng
	for _, p := range cidrs {
		f, l := nft.PrefixRange(p)
		rs = append(rs, rng{f, l})
	}
	slices.SortFunc(rs, func(a, b rng) int { return a.first.Compare(b.first) })
	var merged []rng
	for _, r := range rs {
		if n := len(merged); n > 0 && merged[n-1].first.Is4() == r.first.Is4() {
			m := &merged[n-1]
			if next := m.last.Next(); r.first.Compare(m.last) <= 0 || (next.IsValid() && next == r.first) {
				if r.last.Compare(m.last) > 0 {
					m.last = r.last
				}
				continue
			}
		}
		merged = append(merged, r)
	}
	for _, r := range merged {
		elems := []nftables.SetElement{{Key: nft.AddrKey(r.first)}}
		if end := r.last.Next(); end.IsValid() {
			elems = append(elems, nftables.SetElement{Key: nft.AddrKey(end), IntervalEnd: true})
		}
		if r.first.Is4() {
			v4 = append(v4, elems...)
		} else {
			v6 = append(v6, elems...)
		}
	}
	return v4, v6
}
