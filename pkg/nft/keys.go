package nft

import (
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// ifNameSize is IFNAMSIZ: an ifname key is the name, NUL padded to 16 bytes.
const ifNameSize = 16

// IfNameKey encodes an interface name as an nftables ifname key.
func IfNameKey(name string) []byte {
	b := make([]byte, ifNameSize)
	copy(b, name)
	return b
}

// Concat joins the fields of a concatenated key; each field is padded to a
// multiple of 4 bytes, as the kernel lays out registers (NFT_REG32_*).
func Concat(fields ...[]byte) []byte {
	var out []byte
	for _, f := range fields {
		out = append(out, f...)
		for len(out)%4 != 0 {
			out = append(out, 0)
		}
	}
	return out
}

// AddrKey is the network-order bytes of an address (4 or 16).
func AddrKey(a netip.Addr) []byte { return a.AsSlice() }

// PrefixRange returns the first and last address of p, the bounds of an
// interval set element.
func PrefixRange(p netip.Prefix) (first, last netip.Addr) {
	p = p.Masked()
	first = p.Addr()
	b := first.AsSlice()
	hostBits := len(b)*8 - p.Bits()
	for i := len(b) - 1; i >= 0 && hostBits > 0; i-- {
		n := min(hostBits, 8)
		b[i] |= byte(0xff >> (8 - n))
		hostBits -= n
	}
	last, _ = netip.AddrFromSlice(b)
	return first, last
}

// Registers for concatenated lookups: a 16-byte ifname fills four 32-bit
// registers from NFT_REG32_00 (8), so the address goes after it.
const (
	RegIfName = 8  // NFT_REG32_00
	RegAfter  = 12 // NFT_REG32_04
	Reg1      = 1  // NFT_REG_1, a 128-bit register for single lookups
)

// Verdicts used by podwire's rules.
func Accept() *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictAccept} }
func Drop() *expr.Verdict   { return &expr.Verdict{Kind: expr.VerdictDrop} }
func Return() *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictReturn} }

// LookupSet is a lookup of register reg in set (inverted: "not in set").
func LookupSet(reg uint32, set *nftables.Set, invert bool) *expr.Lookup {
	return &expr.Lookup{SourceRegister: reg, SetName: set.Name, SetID: set.ID, Invert: invert}
}

// LinkLocalMask and LinkLocalPrefix match fe80::/10 (RFC 4291 2.5.6) on a
// 16-byte IPv6 address register: (addr & LinkLocalMask) == LinkLocalPrefix.
var (
	LinkLocalMask   = append([]byte{0xff, 0xc0}, make([]byte, 14)...)
	LinkLocalPrefix = append([]byte{0xfe, 0x80}, make([]byte, 14)...)
)
