package nft

import (
	"net/netip"
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
