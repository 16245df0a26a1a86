package packets

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// Capture is a packet socket (packet(7), ETH_P_ALL) on one interface of a
// netns: it receives every frame from the moment it is opened.
type Capture struct{ fd int }

// OpenCapture opens a capture on ifName in the namespace at nsPath ("":
// every interface, also those made later). The caller closes it.
func OpenCapture(nsPath, ifName string) (*Capture, error) {
	c := &Capture{fd: -1}
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		itf := &net.Interface{}
		if ifName != "" {
			var err error
			if itf, err = net.InterfaceByName(ifName); err != nil {
				return err
			}
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
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
		c.Close()
		return nil, fmt.Errorf("failed to open a capture on %q in %s: %w", ifName, nsPath, err)
	}
	return c, nil
}

// Close closes the capture's socket.
func (c *Capture) Close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// WaitFor reads frames until one matches or d passes.
func (c *Capture) WaitFor(d time.Duration, match func(frame []byte) bool) bool {
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

// IsARPFrom matches an Ethernet frame carrying an ARP packet (RFC 826)
// whose sender protocol address is ip.
func IsARPFrom(ip netip.Addr) func([]byte) bool {
	ip4 := ip.As4()
	return func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_ARP && bytes.Equal(f[28:32], ip4[:])
	}
}
