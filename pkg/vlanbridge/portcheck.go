package vlanbridge

import (
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/pkg/nft"
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
// Why a bridge table: bridged frames never reach the inet hooks (podwire
// turns nf_call_iptables off on its bridge), so the inet source check of the
// primary interface cannot see them.
//
//	meta iifname != @checked accept
//	meta iifname . ether saddr != @port-mac counter drop
//	meta iifname @mac-only accept
//	meta protocol arp meta iifname . arp saddr ip @port-v4 accept
//	meta protocol arp arp saddr ip 0.0.0.0 accept
//	meta protocol ip meta iifname . ip saddr @port-v4 accept
//	meta protocol ip6 meta iifname . ip6 saddr @port-v6 accept
//	meta protocol ip6 ip6 saddr fe80::/10 accept
//	meta protocol ip6 ip6 saddr :: accept
//	counter drop
const (
	portTable      = "podwire-port"
	portChain      = "filter-prerouting"
	setPortChecked = "checked"
	setPortMAC     = "port-mac"
	setMACOnly     = "mac-only"
	setPortV4      = "port-v4"
	setPortV6      = "port-v6"
	// bridgePriorityFilter is NF_BR_PRI_FILTER_BRIDGED.
	bridgePriorityFilter = -200
)

// Offsets in the headers (RFC 791, RFC 8200, RFC 826 for Ethernet/IPv4).
const (
	etherSaddrOffset = 6
	ipv4SaddrOffset  = 12
	ipv6SaddrOffset  = 8
	arpSpaOffset     = 14
)

// PortCheckID is the table's identity, "bridge podwire-port".
var PortCheckID = nft.ID{Family: nftables.TableFamilyBridge, Name: portTable}

var (
	keyPortMAC = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeEtherAddr)
	keyPortV4  = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr)
	keyPortV6  = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIP6Addr)
)

// PortCheckTable describes "bridge podwire-port".
func PortCheckTable() *nft.Table {
	accept := nftables.ChainPolicyAccept
	return &nft.Table{
		Family: nftables.TableFamilyBridge,
		Name:   portTable,
		Sets: []nft.Set{
			{Name: setPortChecked, KeyType: nftables.TypeIFName, Comment: "bridge ports of checked pods"},
			{Name: setPortMAC, KeyType: keyPortMAC, Concatenation: true, Comment: "port . pod MAC"},
			{Name: setMACOnly, KeyType: nftables.TypeIFName, Comment: "checked trunk ports: MAC pinned only"},
			{Name: setPortV4, KeyType: keyPortV4, Concatenation: true, Comment: "port . pod IPv4 address"},
			{Name: setPortV6, KeyType: keyPortV6, Concatenation: true, Comment: "port . pod IPv6 address"},
		},
		Chains: []nft.Chain{{
			Name:     portChain,
			Type:     nftables.ChainTypeFilter,
			Hook:     nftables.ChainHookPrerouting,
			Priority: nftables.ChainPriorityRef(bridgePriorityFilter),
			Policy:   &accept,
			Rules:    portRules(),
		}},
	}
}

func portRules() []nft.RuleFunc {
	return []nft.RuleFunc{
		func(s map[string]*nftables.Set) []expr.Any {
			return []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: nft.Reg1},
				nft.LookupSet(nft.Reg1, s[setPortChecked], true),
				nft.Accept(),
			}
		},
		func(s map[string]*nftables.Set) []expr.Any {
			return []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: nft.RegIfName},
				load(expr.PayloadBaseLLHeader, etherSaddrOffset, 6, nft.RegAfter),
				nft.LookupSet(nft.RegIfName, s[setPortMAC], true),
				&expr.Counter{},
				nft.Drop(),
			}
		},
		func(s map[string]*nftables.Set) []expr.Any {
			return []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: nft.Reg1},
				nft.LookupSet(nft.Reg1, s[setMACOnly], false),
				nft.Accept(),
			}
		},
		portLookup(unix.ETH_P_ARP, arpSpaOffset, 4, setPortV4),
		func(map[string]*nftables.Set) []expr.Any {
			return append(protocol(unix.ETH_P_ARP),
				load(expr.PayloadBaseNetworkHeader, arpSpaOffset, 4, nft.Reg1),
				&expr.Cmp{Op: expr.CmpOpEq, Register: nft.Reg1, Data: make([]byte, 4)},
				nft.Accept())
		},
		portLookup(unix.ETH_P_IP, ipv4SaddrOffset, 4, setPortV4),
		portLookup(unix.ETH_P_IPV6, ipv6SaddrOffset, 16, setPortV6),
		func(map[string]*nftables.Set) []expr.Any {
			// fe80::/10, encoded as nft(8) encodes it (the whole address loaded,
			// masked with ffc0::, compared with fe80::) so that `nft list`
			// prints "ip6 saddr fe80::/10".
			return append(protocol(unix.ETH_P_IPV6),
				load(expr.PayloadBaseNetworkHeader, ipv6SaddrOffset, 16, nft.Reg1),
				&expr.Bitwise{SourceRegister: nft.Reg1, DestRegister: nft.Reg1, Len: 16,
					Mask: nft.LinkLocalMask, Xor: make([]byte, 16)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: nft.Reg1, Data: nft.LinkLocalPrefix},
				nft.Accept())
		},
		func(map[string]*nftables.Set) []expr.Any {
			return append(protocol(unix.ETH_P_IPV6),
				load(expr.PayloadBaseNetworkHeader, ipv6SaddrOffset, 16, nft.Reg1),
				&expr.Cmp{Op: expr.CmpOpEq, Register: nft.Reg1, Data: make([]byte, 16)},
				nft.Accept())
		},
		func(map[string]*nftables.Set) []expr.Any {
			return []expr.Any{&expr.Counter{}, nft.Drop()}
		},
	}
}

func load(base expr.PayloadBase, offset, n, reg uint32) *expr.Payload {
	return &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: reg, Base: base, Offset: offset, Len: n}
}

// protocol matches the frame's ethertype (meta protocol, network order): the
// inner one for a VLAN-tagged frame, whose tag the kernel has taken off.
func protocol(ethType uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: nft.Reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: nft.Reg1, Data: []byte{byte(ethType >> 8), byte(ethType)}},
	}
}

// portLookup accepts a frame of ethType whose "port . source" is in set.
func portLookup(ethType uint16, offset, n uint32, set string) nft.RuleFunc {
	return func(s map[string]*nftables.Set) []expr.Any {
		return append(protocol(ethType),
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: nft.RegIfName},
			load(expr.PayloadBaseNetworkHeader, offset, n, nft.RegAfter),
			nft.LookupSet(nft.RegIfName, s[set], false),
			nft.Accept())
	}
}

// PortCheckElements are the set elements that pin port (the host veth) to
// mac and the addresses of ips, or to mac alone when macOnly (a trunk port);
// comment names the pod. A port without a MAC
// yet (ADD failed before the veth existed) gets its "checked" element only,
// so that a rollback removes what may be there.
func PortCheckElements(port string, mac string, ips []netip.Prefix, macOnly bool, comment string) nft.Elements {
	e := nft.Elements{}
	if port == "" {
		return e
	}
	ifKey := nft.IfNameKey(port)
	e.Add(PortCheckID, setPortChecked, nftables.SetElement{Key: ifKey, Comment: comment})
	if hw, err := net.ParseMAC(mac); err == nil && len(hw) == 6 {
		e.Add(PortCheckID, setPortMAC, nftables.SetElement{Key: nft.Concat(ifKey, hw), Comment: comment})
	}
	if macOnly {
		e.Add(PortCheckID, setMACOnly, nftables.SetElement{Key: ifKey, Comment: comment})
		return e
	}
	for _, p := range ips {
		a := p.Addr().Unmap()
		set := setPortV4
		if a.Is6() {
			set = setPortV6
		}
		e.Add(PortCheckID, set, nftables.SetElement{Key: nft.Concat(ifKey, nft.AddrKey(a)), Comment: comment})
	}
	return e
}
