package cri

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// udpSink records the sources of the datagrams that reach a UDP socket.
type udpSink struct {
	conn *net.UDPConn
	mu   sync.Mutex
	seen map[string]bool // "source payload"
}

// newUDPSink listens on [::]:port in the namespace at nsPath.
func newUDPSink(nsPath string, port int) (*udpSink, error) {
	conn, err := udpListen(nsPath, port)
	if err != nil {
		return nil, err
	}
	s := &udpSink{conn: conn, seen: map[string]bool{}}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.seen[from.Addr().Unmap().String()+" "+string(buf[:n])] = true
			s.mu.Unlock()
		}
	}()
	return s, nil
}

func (s *udpSink) close() { s.conn.Close() }

// got reports whether a datagram with payload from src arrived.
func (s *udpSink) got(src netip.Addr, payload string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[src.String()+" "+payload]
}

// sendFrom sends count datagrams with payload from src (any address: the
// socket is transparent and freebind, so the pod can forge it as a router
// forwarding someone else's packet would) to dst, inside nsPath.
func sendFrom(nsPath string, src netip.Addr, dst netip.AddrPort, payload string, count int) error {
	return ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		// FREEBIND lets bind(2) take the address; TRANSPARENT lets the
		// route lookup use it as source (FLOWI_FLAG_ANYSRC).
		family, level, opts := unix.AF_INET, unix.SOL_IP, []int{unix.IP_FREEBIND, unix.IP_TRANSPARENT}
		if src.Is6() {
			family, level, opts = unix.AF_INET6, unix.SOL_IPV6, []int{unix.IPV6_FREEBIND, unix.IPV6_TRANSPARENT}
		}
		fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("failed to open a UDP socket: %w", err)
		}
		f := os.NewFile(uintptr(fd), "spoof")
		defer f.Close()
		for _, opt := range opts {
			if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
				return fmt.Errorf("failed to set socket option %d: %w", opt, err)
			}
		}
		var from, to unix.Sockaddr
		if src.Is6() {
			from = &unix.SockaddrInet6{Addr: src.As16()}
			to = &unix.SockaddrInet6{Addr: dst.Addr().As16(), Port: int(dst.Port())}
		} else {
			from = &unix.SockaddrInet4{Addr: src.As4()}
			to = &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}
		}
		if err := unix.Bind(fd, from); err != nil {
			return fmt.Errorf("failed to bind to %s: %w", src, err)
		}
		for i := 0; i < count; i++ {
			if err := unix.Sendto(fd, []byte(payload), 0, to); err != nil && err != syscall.EPERM {
				return fmt.Errorf("failed to send from %s to %s: %w", src, dst, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
}
