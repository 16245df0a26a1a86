package vm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// capture is a packet socket on one interface of a netns, receiving every
// frame from the moment it is opened.
type capture struct{ fd int }

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// capturePackets opens a capture on ifName in netns ("" for every
// interface, also those made later), closed when t ends.
func capturePackets(t *testing.T, netns ns.NetNS, ifName string) *capture {
	t.Helper()
	c := &capture{fd: -1}
	err := netns.Do(func(ns.NetNS) error {
		itf := &net.Interface{}
		if ifName != "" {
			var err error
			if itf, err = net.InterfaceByName(ifName); err != nil {
				return err
			}
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		c.fd = fd
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: itf.Index}); err != nil {
			return err
		}
		tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		t.Fatalf("failed to open a capture on %q: %v", ifName, err)
	}
	t.Cleanup(func() { unix.Close(c.fd) })
	return c
}

// waitFor reads frames until one matches or d passes.
func (c *capture) waitFor(d time.Duration, match func(frame []byte) bool) bool {
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil || n < 14 {
			continue
		}
		if match(buf[:n]) {
			return true
		}
	}
	return false
}

// isGratuitousARP matches an ARP request for ip from ip (RFC 5227, 3).
func isGratuitousARP(ip net.IP) func([]byte) bool {
	ip4 := ip.To4()
	return func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_ARP &&
			binary.BigEndian.Uint16(f[20:]) == 1 && bytes.Equal(f[28:32], ip4) && bytes.Equal(f[38:42], ip4)
	}
}

// isNeighborAdvert matches an ICMPv6 neighbour advertisement of target.
func isNeighborAdvert(target net.IP) func([]byte) bool {
	return func(f []byte) bool {
		return len(f) >= 78 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_IPV6 &&
			f[20] == unix.IPPROTO_ICMPV6 && f[54] == 136 && bytes.Equal(f[62:78], target.To16())
	}
}

// mustSee fails t unless the capture sees a matching frame within 5 s.
func mustSee(t *testing.T, c *capture, what string, match func([]byte) bool) {
	t.Helper()
	if !c.waitFor(5*time.Second, match) {
		t.Fatal(fmt.Sprintf("did not see %s", what))
	}
}
