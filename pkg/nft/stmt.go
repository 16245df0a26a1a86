package nft

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The rule vocabulary. A Rule is a list of statements; each statement knows
// both its nft(8) text, as `nft list table` prints it, and the expressions
// it sends over netlink. The two cannot drift apart without a golden test
// (text) or the kernel test (`nft list` of what the expressions built)
// failing.

// proto is the protocol a header field implies: nft(8) adds a match on it
// ahead of the field (a "dependency") and leaves it out of the listing.
type proto int

const (
	protoNone proto = iota
	protoIPv4
	protoIPv6
	protoARP
	protoICMPv6
)

// Field is a packet field a rule matches, looks up or writes: a meta key or
// a header payload (base, offset and length in bytes, from the RFCs).
type Field struct {
	name   string // nft(8) text
	meta   expr.MetaKey
	isMeta bool
	base   expr.PayloadBase
	offset uint32
	len    uint32
	proto  proto
}

// String is the field as nft(8) prints it ("ip6 saddr").
func (f Field) String() string { return f.name }

// Header offsets: RFC 791 (IPv4), RFC 8200 (IPv6), RFC 826 (ARP for
// Ethernet/IPv4), RFC 4443 (ICMPv6 type), IEEE 802.3 (Ethernet source).
var (
	IIFName    = Field{name: "iifname", meta: expr.MetaKeyIIFNAME, isMeta: true, len: ifNameSize}
	OIFName    = Field{name: "oifname", meta: expr.MetaKeyOIFNAME, isMeta: true, len: ifNameSize}
	IPSaddr    = Field{name: "ip saddr", base: expr.PayloadBaseNetworkHeader, offset: 12, len: 4, proto: protoIPv4}
	IPDaddr    = Field{name: "ip daddr", base: expr.PayloadBaseNetworkHeader, offset: 16, len: 4, proto: protoIPv4}
	IP6Saddr   = Field{name: "ip6 saddr", base: expr.PayloadBaseNetworkHeader, offset: 8, len: 16, proto: protoIPv6}
	IP6Daddr   = Field{name: "ip6 daddr", base: expr.PayloadBaseNetworkHeader, offset: 24, len: 16, proto: protoIPv6}
	ARPSaddrIP = Field{name: "arp saddr ip", base: expr.PayloadBaseNetworkHeader, offset: 14, len: 4, proto: protoARP}
	EtherSaddr = Field{name: "ether saddr", base: expr.PayloadBaseLLHeader, offset: 6, len: 6}
	ICMPv6Type = Field{name: "icmpv6 type", base: expr.PayloadBaseTransportHeader, offset: 0, len: 1, proto: protoICMPv6}
	// ICMPv6NDTarget is the Target Address of a neighbour solicitation or
	// advertisement (RFC 4861 4.3 and 4.4: 16 bytes at offset 8 of the
	// ICMPv6 header). nft 1.0.6 (Debian 12) has no name for it ("icmpv6
	// taddr" is later) and prints it as a raw transport-header payload.
	ICMPv6NDTarget = Field{name: "@th,64,128", base: expr.PayloadBaseTransportHeader, offset: 8, len: 16, proto: protoICMPv6}
)

// ICMPv6 message types (RFC 4861 4), with the names nft(8) prints.
const (
	ICMPv6RouterAdvert   byte = 134
	ICMPv6NeighborAdvert byte = 136
	ICMPv6Redirect       byte = 137
)

var icmpv6TypeNames = map[byte]string{
	ICMPv6RouterAdvert:   "nd-router-advert",
	ICMPv6NeighborAdvert: "nd-neighbor-advert",
	ICMPv6Redirect:       "nd-redirect",
}

// Saddr and Daddr are the source and destination address fields of a's
// family.
func Saddr(a netip.Addr) Field {
	if a.Unmap().Is4() {
		return IPSaddr
	}
	return IP6Saddr
}

func Daddr(a netip.Addr) Field {
	if a.Unmap().Is4() {
		return IPDaddr
	}
	return IP6Daddr
}

// ipv4ChecksumOffset is the IPv4 header checksum (RFC 791).
const ipv4ChecksumOffset = 10

// Stmt is one statement of a rule.
type Stmt interface {
	// String is the statement as `nft list` prints it.
	String() string
	exprs(b *builder) []expr.Any
}

// Rule is a static rule: statements in order.
type Rule []Stmt

// String is the rule as `nft list` prints it.
func (r Rule) String() string {
	parts := make([]string, len(r))
	for i, s := range r {
		parts[i] = s.String()
	}
	return strings.Join(parts, " ")
}

// Exprs are the rule's expressions in a table of family.
func (r Rule) Exprs(family nftables.TableFamily) []expr.Any {
	b := &builder{family: family, deps: map[proto]bool{}}
	var out []expr.Any
	for _, s := range r {
		out = append(out, s.exprs(b)...)
	}
	return out
}

// builder carries what one rule's statements share: the table family, which
// decides how a dependency is matched, and the dependencies already matched
// (nft(8) matches each once per rule).
type builder struct {
	family nftables.TableFamily
	deps   map[proto]bool
}

// dep matches the protocol p implies, unless the table's family or an
// earlier statement of the rule already did.
func (b *builder) dep(p proto) []expr.Any {
	if p == protoNone || b.deps[p] {
		return nil
	}
	b.deps[p] = true
	cmp := func(key expr.MetaKey, data ...byte) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: key, Register: regFirst},
			&expr.Cmp{Op: expr.CmpOpEq, Register: regFirst, Data: data},
		}
	}
	if p == protoICMPv6 {
		return append(b.dep(protoIPv6), cmp(expr.MetaKeyL4PROTO, unix.IPPROTO_ICMPV6)...)
	}
	// An inet table matches the layer 3 family, a bridge or netdev table
	// the ethertype; an ip or ip6 table needs nothing.
	l3 := map[proto]struct {
		nfproto   byte
		ethertype uint16
	}{
		protoIPv4: {unix.NFPROTO_IPV4, unix.ETH_P_IP},
		protoIPv6: {unix.NFPROTO_IPV6, unix.ETH_P_IPV6},
		protoARP:  {0, unix.ETH_P_ARP},
	}[p]
	switch b.family {
	case nftables.TableFamilyINet:
		if l3.nfproto != 0 {
			return cmp(expr.MetaKeyNFPROTO, l3.nfproto)
		}
	case nftables.TableFamilyBridge, nftables.TableFamilyNetdev:
		return cmp(expr.MetaKeyPROTOCOL, byte(l3.ethertype>>8), byte(l3.ethertype))
	}
	return nil
}

// regFirst is NFT_REG_1. The kernel reports registers in this canonical
// form, so podwire sends them in it too and a rule reads back byte for byte.
const regFirst = unix.NFT_REG_1

// reg is the register a key field at byte offset off of a concatenation is
// loaded into: the 128-bit NFT_REG_n at a 16-byte boundary, else the 32-bit
// NFT_REG32_nn (fields are padded to 4 bytes, as the set key is laid out).
func reg(off uint32) uint32 {
	if off%16 == 0 {
		return unix.NFT_REG_1 + off/16
	}
	return unix.NFT_REG32_00 + off/4
}

// load loads f into register r.
func (f Field) load(r uint32) expr.Any {
	if f.isMeta {
		return &expr.Meta{Key: f.meta, Register: r}
	}
	return &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: r, Base: f.base, Offset: f.offset, Len: f.len}
}

// lookup is "f1 . f2 @set" or, inverted, "f1 . f2 != @set".
type lookup struct {
	set    string
	fields []Field
	invert bool
}

// In matches when the fields, concatenated, are a key of set.
func In(set string, fields ...Field) Stmt { return lookup{set: set, fields: fields} }

// NotIn matches when they are not.
func NotIn(set string, fields ...Field) Stmt { return lookup{set: set, fields: fields, invert: true} }

func (l lookup) String() string {
	names := make([]string, len(l.fields))
	for i, f := range l.fields {
		names[i] = f.name
	}
	op := " @"
	if l.invert {
		op = " != @"
	}
	return strings.Join(names, " . ") + op + l.set
}

func (l lookup) exprs(b *builder) []expr.Any {
	var out []expr.Any
	for _, f := range l.fields {
		out = append(out, b.dep(f.proto)...)
	}
	off := uint32(0)
	for _, f := range l.fields {
		out = append(out, f.load(reg(off)))
		off += (f.len + 3) &^ 3
	}
	return append(out, &expr.Lookup{SourceRegister: regFirst, SetName: l.set, Invert: l.invert})
}

// match is "field value": equality with an address, a prefix (masked) or a
// range of one-byte values.
type match struct {
	f      Field
	text   string
	encode func() []expr.Any
}

func (m match) String() string { return m.f.name + " " + m.text }

func (m match) exprs(b *builder) []expr.Any { return append(b.dep(m.f.proto), m.encode()...) }

// Is matches f equal to a ("ip6 saddr ::").
func Is(f Field, a netip.Addr) Stmt {
	return match{f: f, text: a.String(), encode: func() []expr.Any {
		return []expr.Any{f.load(regFirst), &expr.Cmp{Op: expr.CmpOpEq, Register: regFirst, Data: a.AsSlice()}}
	}}
}

// IsName matches the interface-name field f equal to name
// ("iifname \"eth1\""), NUL padded to IFNAMSIZ as nft(8) sends it.
func IsName(f Field, name string) Stmt {
	return match{f: f, text: fmt.Sprintf("%q", name), encode: func() []expr.Any {
		return []expr.Any{f.load(regFirst), &expr.Cmp{Op: expr.CmpOpEq, Register: regFirst, Data: IfNameKey(name)}}
	}}
}

// HasNamePrefix matches the interface-name field f starting with prefix
// ("iifname \"pwv*\"": nft(8) compares the prefix's bytes only).
func HasNamePrefix(f Field, prefix string) Stmt {
	return match{f: f, text: fmt.Sprintf("%q", prefix+"*"), encode: func() []expr.Any {
		return []expr.Any{f.load(regFirst), &expr.Cmp{Op: expr.CmpOpEq, Register: regFirst, Data: []byte(prefix)}}
	}}
}

// InPrefix matches f inside p ("ip6 saddr fe80::/10"), encoded as nft(8)
// encodes it: the whole field loaded, masked, compared with the prefix.
func InPrefix(f Field, p netip.Prefix) Stmt { return prefixMatch(f, p, expr.CmpOpEq) }

// NotInPrefix matches f outside p ("ip6 saddr != fe80::/10").
func NotInPrefix(f Field, p netip.Prefix) Stmt { return prefixMatch(f, p, expr.CmpOpNeq) }

func prefixMatch(f Field, p netip.Prefix, op expr.CmpOp) Stmt {
	p = p.Masked()
	mask := make([]byte, f.len)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	neq := ""
	if op == expr.CmpOpNeq {
		neq = "!= "
	}
	text := neq + p.String()
	if f.raw() {
		// nft(8) knows no type for a raw payload: it prints the mask and
		// the value as integers.
		text = fmt.Sprintf("& 0x%x %s0x%x", mask, neq, p.Addr().AsSlice())
	}
	return match{f: f, text: text, encode: func() []expr.Any {
		return []expr.Any{
			f.load(regFirst),
			&expr.Bitwise{SourceRegister: regFirst, DestRegister: regFirst, Len: f.len, Mask: mask, Xor: make([]byte, f.len)},
			&expr.Cmp{Op: op, Register: regFirst, Data: p.Addr().AsSlice()},
		}
	}}
}

// raw reports whether nft(8) prints f as a raw payload ("@th,64,128").
func (f Field) raw() bool { return strings.HasPrefix(f.name, "@") }

// IsICMPv6Type matches the ICMPv6 type t, one of the ICMPv6* constants
// ("icmpv6 type nd-neighbor-advert").
func IsICMPv6Type(t byte) Stmt {
	name, ok := icmpv6TypeNames[t]
	if !ok {
		name = fmt.Sprint(t)
	}
	return match{f: ICMPv6Type, text: name, encode: func() []expr.Any {
		return []expr.Any{ICMPv6Type.load(regFirst), &expr.Cmp{Op: expr.CmpOpEq, Register: regFirst, Data: []byte{t}}}
	}}
}

// InRange matches a one-byte field between lo and hi inclusive
// ("icmpv6 type 134-136").
func InRange(f Field, lo, hi byte) Stmt {
	return match{f: f, text: fmt.Sprintf("%d-%d", lo, hi), encode: func() []expr.Any {
		return []expr.Any{
			f.load(regFirst),
			&expr.Cmp{Op: expr.CmpOpGte, Register: regFirst, Data: []byte{lo}},
			&expr.Cmp{Op: expr.CmpOpLte, Register: regFirst, Data: []byte{hi}},
		}
	}}
}

// verdict is "accept" or "drop".
type verdict expr.VerdictKind

func (v verdict) String() string {
	if expr.VerdictKind(v) == expr.VerdictAccept {
		return "accept"
	}
	return "drop"
}

func (v verdict) exprs(*builder) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictKind(v)}}
}

// Accept and Drop end a rule.
var (
	Accept Stmt = verdict(expr.VerdictAccept)
	Drop   Stmt = verdict(expr.VerdictDrop)
)

// counter is "counter" (`nft -s list` leaves out its values).
type counter struct{}

func (counter) String() string            { return "counter" }
func (counter) exprs(*builder) []expr.Any { return []expr.Any{&expr.Counter{}} }

// Counter counts the packets and bytes that reach it.
var Counter Stmt = counter{}

type notrack struct{}

func (notrack) String() string            { return "notrack" }
func (notrack) exprs(*builder) []expr.Any { return []expr.Any{&expr.Notrack{}} }

// Notrack exempts the packet from connection tracking (nft(8) "notrack";
// only before conntrack's hook: prerouting or output at priority raw).
var Notrack Stmt = notrack{}

// write is "ip6 saddr set ADDR": a stateless address rewrite.
type write struct {
	f Field
	a netip.Addr
}

// SetAddr rewrites address field f to a, with the checksum updates nft(8)
// asks for.
func SetAddr(f Field, a netip.Addr) Stmt { return write{f, a.Unmap()} }

func (w write) String() string { return w.f.name + " set " + w.a.String() }

// exprs: the address is part of the TCP/UDP/ICMPv6 pseudo-header, so the
// write updates the L4 checksum (NFT_PAYLOAD_L4CSUM_PSEUDOHDR), and for IPv4
// also the header checksum (csum_type inet at offset 10), as nft(8) encodes
// `ip saddr set`.
//
// IPv6 has no header checksum, and nft(8) sends `csum_type 0 csum_flags
// 0x1`; google/nftables v0.3.0 cannot: expr.Payload marshals CsumFlags only
// when CsumType is not none, so the L4 checksum would be left stale and the
// pod would drop the probe (seen only with real checksums: a veth peer's
// CHECKSUM_PARTIAL packets hide it). For IPv6 the write therefore asks for
// csum_type inet with csum_off pointing at the first two bytes of the address
// being written. The kernel (nft_payload_set_eval) sums the old and new
// address first, adjusts those two bytes, updates the L4 checksum, and only
// then stores the new address over them: the header-checksum step writes
// into bytes that are overwritten, and the flag reaches the kernel. `nft
// list` prints the same text either way; the probe SNAT integration test
// proves the checksums with full-checksum packets.
func (w write) exprs(b *builder) []expr.Any {
	csumOff := w.f.offset // overwritten by the address itself (IPv6)
	if w.f.proto == protoIPv4 {
		csumOff = ipv4ChecksumOffset
	}
	return append(b.dep(w.f.proto),
		&expr.Immediate{Register: regFirst, Data: w.a.AsSlice()},
		&expr.Payload{
			OperationType:  expr.PayloadWrite,
			SourceRegister: regFirst,
			Base:           w.f.base,
			Offset:         w.f.offset,
			Len:            w.f.len,
			CsumType:       expr.CsumTypeInet,
			CsumOffset:     csumOff,
			CsumFlags:      unix.NFT_PAYLOAD_L4CSUM_PSEUDOHDR,
		})
}

// snat is "snat ip to ADDR".
type snat struct{ a netip.Addr }

// SNAT rewrites the source of a new connection to a (NAT chains only).
func SNAT(a netip.Addr) Stmt { return snat{a.Unmap()} }

func (s snat) String() string {
	if s.a.Is4() {
		return "snat ip to " + s.a.String()
	}
	return "snat ip6 to " + s.a.String()
}

func (s snat) exprs(*builder) []expr.Any {
	fam := uint32(unix.NFPROTO_IPV6)
	if s.a.Is4() {
		fam = unix.NFPROTO_IPV4
	}
	return []expr.Any{
		&expr.Immediate{Register: regFirst, Data: s.a.AsSlice()},
		// The kernel reports the one-address range as min = max; sent so,
		// the rule reads back byte for byte.
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: fam, RegAddrMin: regFirst, RegAddrMax: regFirst},
	}
}

// InEtherPrefix matches the Ethernet address field f (EtherSaddr) inside
// the prefix of the first bits of mac, a multiple of 8 ("ether saddr
// 00:00:5e:00:01:00/40"). nft(8) encodes a byte-aligned prefix as a load of
// its bytes alone and one compare, without a mask.
func InEtherPrefix(f Field, mac net.HardwareAddr, bits int) Stmt {
	if bits%8 != 0 || bits <= 0 || bits > 8*len(mac) {
		panic(fmt.Sprintf("nft: Ethernet prefix /%d is not a whole number of bytes of %s", bits, mac))
	}
	n := uint32(bits / 8)
	return match{f: f, text: fmt.Sprintf("%s/%d", mac, bits), encode: func() []expr.Any {
		return []expr.Any{
			&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: regFirst, Base: f.base, Offset: f.offset, Len: n},
			&expr.Cmp{Op: expr.CmpOpEq, Register: regFirst, Data: slices.Clone(mac[:n])},
		}
	}}
}
