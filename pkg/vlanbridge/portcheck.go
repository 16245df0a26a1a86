package vlanbridge

import (
	"net"
	"net/netip"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/sourcecheck"
)

// The bridge port check: table "bridge podwire-port", one base chain at the
// bridge's prerouting hook, and sets keyed by port name. It pins what an
// ordinary pod with static VLAN addresses may send into the bridge: its own
// source MAC, and its own IPv4 (IP and ARP sender) and IPv6 sources. IPv6
// link-local and unspecified sources stay allowed for neighbour discovery,
// and ARP probes (sender 0.0.0.0, RFC 5227) too. Ports of forwarding pods and
// of pods without static addresses are not in "checked" and cost one lookup.
// A trunk port's tagged VLANs carry addresses the pod configures itself on
// its 802.1Q subinterfaces, unknown to podwire: a checked trunk port is in
// "mac-only", pinned to its MAC alone.
//
// Why a bridge table: the inet source check of the primary interface does
// not see bridged frames (podwire turns nf_call_iptables off on its bridge,
// and with br_netfilter they reach the inet hooks as the bridge's, not the
// port's).
//
// The first rules keep the VLAN segments (what enters the bridge from a
// pod's port, "pwv" and a hash, or from the uplink) out of the node's
// connection tracking: br_netfilter passes a bridged IPv4 frame to the IPv4 hooks
// unless both the netns's net.bridge.bridge-nf-call-iptables and the
// bridge's nf_call_iptables are 0 (br_nf_pre_routing,
// net/bridge/br_netfilter_hooks.c), so the bridge attribute cannot opt out
// where kube-proxy's installers set the sysctl to 1; there a Service's DNAT
// would rewrite a tenant's bridged flow to a VIP it holds on its own VLAN.
// Untracked frames get no NAT. The chain's priority (filter, -200) is ahead
// of br_netfilter's hook (NF_BR_PRI_BRNF, 0).
//
// The chain (the whole table is the golden file testdata/portcheck.nft):
//
//	iifname "pwv*" notrack
//	iifname "eth1" notrack            (one per uplink candidate)
//	iifname != @checked accept
//	iifname . ether saddr != @port-mac counter drop
//	iifname @mac-only accept
//	iifname . arp saddr ip @port-v4 accept
//	arp saddr ip 0.0.0.0 accept
//	iifname . ip saddr @port-v4 accept
//	iifname . ip6 saddr @port-v6 accept
//	ip6 saddr fe80::/10 accept
//	ip6 saddr :: accept
//	counter drop
const (
	portTable  = "podwire-port"
	portChain  = "filter-prerouting"
	setPortMAC = "port-mac"
	setMACOnly = "mac-only"
	setPortV4  = "port-v4"
	setPortV6  = "port-v6"
)

// PortCheckID is the table's identity, "bridge podwire-port".
var PortCheckID = nft.ID{Family: nftables.TableFamilyBridge, Name: portTable}

// PortCheckTable describes "bridge podwire-port" for the uplink candidates
// uplinks (config.NetConf.Uplinks; golden file testdata/portcheck.nft), in
// the source check's vocabulary.
func PortCheckTable(uplinks []string) *nft.Table {
	rules := []nft.Rule{{nft.HasNamePrefix(nft.IIFName, hostVethPrefix), nft.Notrack}}
	for _, u := range uplinks {
		rules = append(rules, nft.Rule{nft.IsName(nft.IIFName, u), nft.Notrack})
	}
	rules = append(rules,
		sourcecheck.Unchecked(),
		nft.Rule{nft.NotIn(setPortMAC, nft.IIFName, nft.EtherSaddr), nft.Counter, nft.Drop},
		nft.Rule{nft.In(setMACOnly, nft.IIFName), nft.Accept},
		sourcecheck.Own(setPortV4, nft.ARPSaddrIP),
		nft.Rule{nft.Is(nft.ARPSaddrIP, netip.IPv4Unspecified()), nft.Accept},
		sourcecheck.Own(setPortV4, nft.IPSaddr),
		sourcecheck.Own(setPortV6, nft.IP6Saddr),
	)
	rules = append(append(rules, sourcecheck.NeighbourDiscovery()...), sourcecheck.DropRest())
	return &nft.Table{
		Family: nftables.TableFamilyBridge,
		Name:   portTable,
		Sets: []nft.Set{
			sourcecheck.CheckedSet("bridge ports of checked pods"),
			sourcecheck.IfSet(setPortMAC, nft.TypeEtherAddr, false, "port . pod MAC"),
			{Name: setMACOnly, Key: []nft.KeyType{nft.TypeIFName}, Comment: "checked trunk ports: MAC pinned only"},
			sourcecheck.IfSet(setPortV4, nft.TypeIPv4Addr, false, "port . pod IPv4 address"),
			sourcecheck.IfSet(setPortV6, nft.TypeIPv6Addr, false, "port . pod IPv6 address"),
		},
		Chains: []nft.Chain{{
			Name:     portChain,
			Type:     nftables.ChainTypeFilter,
			Hook:     nftables.ChainHookPrerouting,
			Priority: nft.BridgePriorityFilter,
			Rules:    rules,
		}},
	}
}

// PortCheckElements are the set elements that pin port (the host veth) to
// mac and the addresses of ips, or to mac alone when macOnly (a trunk port);
// comment names the pod. A port without a MAC
// yet (ADD failed before the veth existed) gets its "checked" element only,
// so that a rollback removes what may be there.
func PortCheckElements(port string, mac string, ips []netip.Prefix, macOnly bool, comment string) nft.Elements {
	e := nft.Elements{}
	AddPortCheckElements(e, port, mac, ips, macOnly, comment)
	return e
}

// AddPortCheckElements adds the set elements of PortCheckElements to e (a
// rebuild of the node tables gathers every pod's into one).
func AddPortCheckElements(e nft.Elements, port string, mac string, ips []netip.Prefix, macOnly bool, comment string) {
	if port == "" {
		return
	}
	e.Add(PortCheckID, sourcecheck.SetChecked, sourcecheck.CheckedElement(port, comment))
	if hw, err := net.ParseMAC(mac); err == nil && len(hw) == 6 {
		e.Add(PortCheckID, setPortMAC, nftables.SetElement{Key: nft.Concat(nft.IfNameKey(port), hw), Comment: comment})
	}
	if macOnly {
		e.Add(PortCheckID, setMACOnly, sourcecheck.CheckedElement(port, comment))
		return
	}
	for _, p := range ips {
		a := p.Addr().Unmap()
		set := setPortV4
		if a.Is6() {
			set = setPortV6
		}
		e.Add(PortCheckID, set, sourcecheck.AddrElement(port, a, comment))
	}
}
