package vlanbridge

import (
	"net"
	"net/netip"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vrrp"
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
// VRRP (RFC 5798): a pod's port may send from the virtual MACs of the
// groups an admin granted it (podwire.io/vrrp, vlanGrants[].vrrp), which
// are the elements of "vrrp-mac". Every other pod port, checked or not
// (forwarding pods' ports are not pinned to a MAC), is kept off the VRRP
// MAC ranges 00:00:5e:00:01:00/40 (IPv4) and 00:00:5e:00:02:00/40 (IPv6),
// so no pod without the grant can take a virtual router's traffic over by
// sending from its MAC. The uplink is not a pod port: the VRRP routers
// outside the node keep their MACs. On a checked port the granted virtual
// addresses join the pod's own in port-v4 and port-v6.
//
// The chain (the whole table is the golden file
// pkg/nft/testdata/portcheck-access.nft):
//
//	iifname "pwv*" notrack
//	iifname "eth1" notrack            (one per uplink candidate)
//	iifname "pwv*" ether saddr 00:00:5e:00:01:00/40 iifname . ether saddr != @vrrp-mac counter drop
//	iifname "pwv*" ether saddr 00:00:5e:00:02:00/40 iifname . ether saddr != @vrrp-mac counter drop
//	iifname != @checked accept
//	iifname . ether saddr != @port-mac iifname . ether saddr != @vrrp-mac counter drop
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
	setVRRPMAC = "vrrp-mac"
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
	for _, p := range []net.HardwareAddr{vrrp.MACPrefix4, vrrp.MACPrefix6} {
		rules = append(rules, nft.Rule{nft.HasNamePrefix(nft.IIFName, hostVethPrefix), nft.InEtherPrefix(nft.EtherSaddr, p, vrrp.MACPrefixBits),
			nft.NotIn(setVRRPMAC, nft.IIFName, nft.EtherSaddr), nft.Counter, nft.Drop})
	}
	rules = append(rules,
		sourcecheck.Unchecked(),
		nft.Rule{nft.NotIn(setPortMAC, nft.IIFName, nft.EtherSaddr), nft.NotIn(setVRRPMAC, nft.IIFName, nft.EtherSaddr), nft.Counter, nft.Drop},
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
			sourcecheck.IfSet(setVRRPMAC, nft.TypeEtherAddr, false, "port . granted VRRP virtual MAC"),
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

// PortElements are the set elements of the attachment v's port (the host
// veth) in "bridge podwire-port"; comment names the pod.
func PortElements(v *state.VLANAttachment, comment string) nft.Elements {
	e := nft.Elements{}
	AddPortElements(e, v, comment)
	return e
}

// AddPortElements adds the elements of PortElements to e (a rebuild of the
// node tables gathers every pod's into one): on a checked port (PortCheck)
// the pin to v's MAC and to its addresses and virtual addresses, or to its
// MAC alone on a trunk port or PortMACOnly; on any port the virtual MACs
// of v's VRRP groups. A port without a MAC yet (ADD failed before the veth
// existed) gets its "checked" element only, so that a rollback removes
// what may be there.
func AddPortElements(e nft.Elements, v *state.VLANAttachment, comment string) {
	port := v.HostVeth
	if port == "" {
		return
	}
	for _, g := range v.VRRP {
		for _, mac := range g.MACs() {
			e.Add(PortCheckID, setVRRPMAC, nftables.SetElement{Key: nft.Concat(nft.IfNameKey(port), mac), Comment: comment})
		}
	}
	if !v.PortCheck {
		return
	}
	e.Add(PortCheckID, sourcecheck.SetChecked, sourcecheck.CheckedElement(port, comment))
	if hw, err := net.ParseMAC(v.MAC); err == nil && len(hw) == 6 {
		e.Add(PortCheckID, setPortMAC, nftables.SetElement{Key: nft.Concat(nft.IfNameKey(port), hw), Comment: comment})
	}
	if len(v.Tagged) > 0 || v.PortMACOnly {
		e.Add(PortCheckID, setMACOnly, sourcecheck.CheckedElement(port, comment))
		return
	}
	seen := map[netip.Addr]bool{}
	addrs := make([]netip.Addr, 0, len(v.IPs))
	for _, p := range v.IPs {
		addrs = append(addrs, p.Addr())
	}
	for _, g := range v.VRRP {
		addrs = append(addrs, g.VIPs...)
	}
	for _, a := range addrs {
		if a = a.Unmap(); seen[a] {
			continue
		}
		seen[a] = true
		set := setPortV4
		if a.Is6() {
			set = setPortV6
		}
		e.Add(PortCheckID, set, sourcecheck.AddrElement(port, a, comment))
	}
}
