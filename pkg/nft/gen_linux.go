package nft

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// NFT_MSG_GETGEN and its reply's attribute NFTA_GEN_ID
// (include/uapi/linux/netfilter/nf_tables.h).
const (
	msgGetGen = unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN
	attrGenID = 1
)

// Generation returns the ruleset generation of the calling thread's netns
// (NFT_MSG_GETGEN): the kernel's base_seq, which nf_tables_commit bumps by
// one for every batch that commits at least one change, whoever sends it,
// and never for an empty one (net/netfilter/nf_tables_api.c,
// nf_tables_commit). One socket, one request, one reply: no dump.
func Generation() (uint32, error) {
	fd, err := GenerationSocket()
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return readGeneration(fd)
}

// GenerationSocket opens a NETLINK_NETFILTER socket in the calling
// thread's netns, for the generation requests of an Intact.
func GenerationSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return -1, fmt.Errorf("nftables generation: %w", err)
	}
	return fd, nil
}

// bootTime is when the machine booted, in Unix seconds (CLOCK_REALTIME
// minus CLOCK_BOOTTIME): another value after a reboot.
func bootTime() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return (time.Now().UnixNano() - ts.Nano() + 5e8) / 1e9
}

// readGeneration sends NFT_MSG_GETGEN on fd and reads NFTA_GEN_ID.
func readGeneration(fd int) (uint32, error) {
	// nlmsghdr (16 bytes) + nfgenmsg (4 bytes: family AF_UNSPEC, version
	// NFNETLINK_V0, res_id 0).
	req := make([]byte, unix.NLMSG_HDRLEN+4)
	binary.NativeEndian.PutUint32(req[0:4], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:6], msgGetGen)
	binary.NativeEndian.PutUint16(req[6:8], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:12], 1)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("nftables generation: %w", err)
	}
	buf := make([]byte, 256)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, fmt.Errorf("nftables generation: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return 0, fmt.Errorf("nftables generation: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR {
			if len(m.Data) >= 4 {
				if e := int32(binary.NativeEndian.Uint32(m.Data[:4])); e != 0 {
					return 0, fmt.Errorf("nftables generation: %w", unix.Errno(-e))
				}
			}
			continue
		}
		if len(m.Data) < 4 {
			continue
		}
		attrs := m.Data[4:]
		for len(attrs) >= unix.SizeofNlAttr {
			l := int(binary.NativeEndian.Uint16(attrs[0:2]))
			typ := binary.NativeEndian.Uint16(attrs[2:4]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
			if l < unix.SizeofNlAttr || l > len(attrs) {
				break
			}
			if typ == attrGenID && l >= unix.SizeofNlAttr+4 {
				return binary.BigEndian.Uint32(attrs[4:8]), nil
			}
			attrs = attrs[(l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1):]
		}
	}
	return 0, fmt.Errorf("nftables generation: no NFTA_GEN_ID in the reply")
}
