package sourcecheck

import (
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/pkg/nft"
)

// Header offsets of the source address (RFC 791, RFC 8200).
const (
	ipv4SaddrOffset = 12
	ipv6SaddrOffset = 8
)

// rules is the static chain, in order:
//
//	meta iifname != @checked accept
//	meta nfproto ipv4 meta iifname . ip saddr @pod-v4 accept
//	meta nfproto ipv4 meta iifname . ip saddr @allowed-v4 accept
//	meta nfproto ipv6 meta iifname . ip6 saddr @pod-v6 accept
//	meta nfproto ipv6 meta iifname . ip6 saddr @allowed-v6 accept
//	meta nfproto ipv6 ip6 saddr fe80::/10 accept
//	meta nfproto ipv6 ip6 saddr :: accept
//	counter drop
//
// Concatenated lookups load the 16-byte ifname into NFT_REG32_00..03
// (nft.RegIfName) and the address right after it (nft.RegAfter), the layout
// nft(8) uses and the set's key length (20 or 32 bytes) expects.
func rules() []nft.RuleFunc {
	return []nft.RuleFunc{
		func(s map[string]*nftables.Set) []expr.Any {
			return []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: nft.Reg1},
				nft.LookupSet(nft.Reg1, s[setChecked], true),
				nft.Accept(),
			}
		},
		concatLookup(unix.NFPROTO_IPV4, ipv4SaddrOffset, 4, setPodV4),
		concatLookup(unix.NFPROTO_IPV4, ipv4SaddrOffset, 4, setAllowV4),
		concatLookup(unix.NFPROTO_IPV6, ipv6SaddrOffset, 16, setPodV6),
		concatLookup(unix.NFPROTO_IPV6, ipv6SaddrOffset, 16, setAllowV6),
		func(map[string]*nftables.Set) []expr.Any {
			// fe80::/10, encoded as nft(8) encodes it (the whole address loaded,
			// masked with ffc0::, compared with fe80::) so that `nft list`
			// prints "ip6 saddr fe80::/10".
			return append(nfproto(unix.NFPROTO_IPV6),
				&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: nft.Reg1,
					Base: expr.PayloadBaseNetworkHeader, Offset: ipv6SaddrOffset, Len: 16},
				&expr.Bitwise{SourceRegister: nft.Reg1, DestRegister: nft.Reg1, Len: 16,
					Mask: nft.LinkLocalMask, Xor: make([]byte, 16)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: nft.Reg1, Data: nft.LinkLocalPrefix},
				nft.Accept(),
			)
		},
		func(map[string]*nftables.Set) []expr.Any {
			return append(nfproto(unix.NFPROTO_IPV6),
				&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: nft.Reg1,
					Base: expr.PayloadBaseNetworkHeader, Offset: ipv6SaddrOffset, Len: 16},
				&expr.Cmp{Op: expr.CmpOpEq, Register: nft.Reg1, Data: make([]byte, 16)},
				nft.Accept(),
			)
		},
		func(map[string]*nftables.Set) []expr.Any {
			return []expr.Any{&expr.Counter{}, nft.Drop()}
		},
	}
}

// nfproto matches the packet's family (meta nfproto).
func nfproto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: nft.Reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: nft.Reg1, Data: []byte{proto}},
	}
}

// concatLookup accepts a packet of family proto whose "iifname . saddr" is in
// set.
func concatLookup(proto byte, offset, alen uint32, set string) nft.RuleFunc {
	return func(s map[string]*nftables.Set) []expr.Any {
		return append(nfproto(proto),
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: nft.RegIfName},
			&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: nft.RegAfter,
				Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: alen},
			nft.LookupSet(nft.RegIfName, s[set], false),
			nft.Accept(),
		)
	}
}
