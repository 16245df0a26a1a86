package packets

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// Claims of an address on a shared segment, as a pod that wants a
// neighbour's traffic would make them.

// SendGratuitousARP broadcasts, from ifName inside nsPath, one ARP reply
// claiming sender (RFC 826; sender and target IP both sender, RFC 5227 3)
// with the interface's own MAC.
func SendGratuitousARP(nsPath, ifName string, sender netip.Addr) error {
	return ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		link, err := netlinksafe.LinkByName(ifName)
		if err != nil {
			return err
		}
		mac := link.Attrs().HardwareAddr
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
		if err != nil {
			return fmt.Errorf("failed to open a packet socket: %w", err)
		}
		defer unix.Close(fd)
		ip := sender.As4()
		pkt := make([]byte, 28)
		binary.BigEndian.PutUint16(pkt[0:], 1)             // Ethernet
		binary.BigEndian.PutUint16(pkt[2:], unix.ETH_P_IP) // IPv4
		pkt[4], pkt[5] = 6, 4
		binary.BigEndian.PutUint16(pkt[6:], 2) // reply
		copy(pkt[8:14], mac)
		copy(pkt[14:18], ip[:])
		copy(pkt[18:24], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		copy(pkt[24:28], ip[:])
		to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: link.Attrs().Index, Halen: 6,
			Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
		if err := unix.Sendto(fd, pkt, 0, to); err != nil && err != unix.EPERM {
			return fmt.Errorf("failed to send ARP claiming %s: %w", sender, err)
		}
		return nil
	})
}

// SendNeighborAdvert sends, from ifName inside nsPath, one unsolicited
// neighbour advertisement (RFC 4861 4.4: override flag, target link-layer
// address option with the interface's MAC) claiming target, to all nodes
// (ff02::1), from the address src (the kernel computes the checksum of an
// ICMPv6 raw socket).
func SendNeighborAdvert(nsPath, ifName string, src, target netip.Addr) error {
	return ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		link, err := netlinksafe.LinkByName(ifName)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
		if err != nil {
			return fmt.Errorf("failed to open an ICMPv6 socket: %w", err)
		}
		defer unix.Close(fd)
		idx := link.Attrs().Index
		for _, o := range [][2]int{{unix.IPV6_MULTICAST_HOPS, 255}, {unix.IPV6_UNICAST_HOPS, 255}, {unix.IPV6_MULTICAST_IF, idx}} {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, o[0], o[1]); err != nil {
				return fmt.Errorf("failed to set IPv6 socket option %d: %w", o[0], err)
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: src.As16()}); err != nil {
			return fmt.Errorf("failed to bind to %s: %w", src, err)
		}
		msg := make([]byte, 32)
		msg[0] = 136                                    // neighbour advertisement
		binary.BigEndian.PutUint32(msg[4:], 0x20000000) // override
		tgt := target.As16()
		copy(msg[8:24], tgt[:])
		msg[24], msg[25] = 2, 1 // target link-layer address, 8 bytes
		copy(msg[26:32], link.Attrs().HardwareAddr)
		to := &unix.SockaddrInet6{Addr: netip.MustParseAddr("ff02::1").As16(), ZoneId: uint32(idx)}
		if err := unix.Sendto(fd, msg, 0, to); err != nil && err != unix.EPERM {
			return fmt.Errorf("failed to send a neighbour advertisement of %s: %w", target, err)
		}
		return nil
	})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
