package neigh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/j-keck/arping"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// allNodes is the link-local all-nodes multicast group, ff02::1.
var allNodes = net.ParseIP("ff02::1")

// Announce sends one announcement per address of ifName: gratuitous ARP for
// IPv4, unsolicited NA for IPv6. It tries every address and returns all errors.
func Announce(ifName string, addrs []netip.Addr) error {
	var errs []error
	for _, a := range addrs {
		var err error
		if a.Is4() || a.Is4In6() {
			err = GratuitousARP(ifName, a.Unmap())
		} else {
			err = UnsolicitedNA(ifName, a)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// GratuitousARP broadcasts an ARP request for addr from addr on ifName.
func GratuitousARP(ifName string, addr netip.Addr) error {
	if err := arping.GratuitousArpOverIfaceByName(addr.AsSlice(), ifName); err != nil {
		return fmt.Errorf("failed to send gratuitous ARP for %s on %q: %w", addr, ifName, err)
	}
	return nil
}

// UnsolicitedNA multicasts a neighbour advertisement of addr to ff02::1 on
// ifName, from addr itself. The socket is bound with IPV6_FREEBIND, so an
// address still in duplicate address detection can be announced too. The
// kernel fills in the ICMPv6 checksum (RFC 3542, 3.1).
func UnsolicitedNA(ifName string, addr netip.Addr) error {
	iface, err := net.InterfaceByName(ifName)
	if err != nil {
		return fmt.Errorf("failed to look up %q for the neighbour advertisement of %s: %w", ifName, addr, err)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	src := &net.IPAddr{IP: addr.AsSlice()}
	if addr.Is6() && addr.IsLinkLocalUnicast() {
		src.Zone = ifName
	}
	conn, err := lc.ListenPacket(context.Background(), "ip6:ipv6-icmp", src.String())
	if err != nil {
		return fmt.Errorf("failed to open an ICMPv6 socket on %s: %w", addr, err)
	}
	defer conn.Close()
	p := ipv6.NewPacketConn(conn)
	if err := p.SetMulticastHopLimit(255); err != nil {
		return fmt.Errorf("failed to set hop limit 255 on %q: %w", ifName, err)
	}
	if err := p.SetMulticastInterface(iface); err != nil {
		return fmt.Errorf("failed to set multicast interface %q: %w", ifName, err)
	}
	msg := icmp.Message{Type: ipv6.ICMPTypeNeighborAdvertisement, Body: &icmp.RawBody{Data: naBody(addr, iface.HardwareAddr)}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	cm := &ipv6.ControlMessage{HopLimit: 255, IfIndex: iface.Index}
	if _, err := p.WriteTo(b, cm, &net.IPAddr{IP: allNodes, Zone: ifName}); err != nil {
		return fmt.Errorf("failed to send neighbour advertisement of %s on %q: %w", addr, ifName, err)
	}
	return nil
}
