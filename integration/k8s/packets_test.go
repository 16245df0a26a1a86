package k8s

// UDP helpers, as the CRI suite's (integration/cri): test files of another
// package cannot be imported.

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// udpListen opens a UDP socket in the namespace at nsPath bound to
// [::]:port. The socket stays in that namespace.
func udpListen(nsPath string, port int) (*net.UDPConn, error) {
	var conn *net.UDPConn
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		conn, err = net.ListenUDP("udp", &net.UDPAddr{Port: port})
		return err
	})
	return conn, err
}

// udpSink records the sources of the datagrams that reach a UDP socket.
type udpSink struct {
	conn *net.UDPConn
	mu   sync.Mutex
	seen map[string]bool // "source payload"
}

// newUDPSink listens on port in the namespace at nsPath until the test ends.
func newUDPSink(t *testing.T, nsPath string, port int) *udpSink {
	t.Helper()
	conn, err := udpListen(nsPath, port)
	if err != nil {
		t.Fatalf("failed to listen on UDP %d: %v", port, err)
	}
	t.Cleanup(func() { conn.Close() })
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
	return s
}

// got reports whether a datagram with payload from src arrived.
func (s *udpSink) got(src netip.Addr, payload string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[src.String()+" "+payload]
}

// waitGot waits up to timeout for a datagram with payload from src.
func (s *udpSink) waitGot(src netip.Addr, payload string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if s.got(src, payload) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s.got(src, payload)
}

// sendFrom sends count datagrams with payload from src (any address: the
// socket is transparent and freebind, as a router forwarding someone
// else's packet would send it) to dst, inside nsPath.
func sendFrom(nsPath string, src netip.Addr, dst netip.AddrPort, payload string, count int) error {
	return ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("failed to open a UDP socket: %w", err)
		}
		f := os.NewFile(uintptr(fd), "spoof")
		defer f.Close()
		for _, opt := range []int{unix.IP_FREEBIND, unix.IP_TRANSPARENT} {
			if err := unix.SetsockoptInt(fd, unix.SOL_IP, opt, 1); err != nil {
				return fmt.Errorf("failed to set socket option %d: %w", opt, err)
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: src.As4()}); err != nil {
			return fmt.Errorf("failed to bind to %s: %w", src, err)
		}
		to := &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}
		for i := 0; i < count; i++ {
			if err := unix.Sendto(fd, []byte(payload), 0, to); err != nil && err != syscall.EPERM {
				return fmt.Errorf("failed to send from %s to %s: %w", src, dst, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
}

// udpEchoServer answers every datagram to addr in nsPath with the source
// address it saw and the payload, until the test ends. It binds addr, so
// that its answers leave from the address the client dialed.
func udpEchoServer(t *testing.T, nsPath string, addr netip.AddrPort) {
	t.Helper()
	var conn *net.UDPConn
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		t.Fatalf("failed to listen on UDP %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			conn.WriteToUDPAddrPort([]byte(from.Addr().Unmap().String()+" "+string(buf[:n])), from)
		}
	}()
}

// udpExchange sends a datagram from nsPath to dst and waits for the echo,
// retrying (new socket each time) while neighbours settle; it returns the
// source the server saw.
func udpExchange(nsPath string, dst netip.AddrPort, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		src, err := udpExchangeOnce(nsPath, dst)
		if err == nil {
			return src, nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("no echo from %s within %v: %w", dst, timeout, lastErr)
}

func udpExchangeOnce(nsPath string, dst netip.AddrPort) (string, error) {
	var conn *net.UDPConn
	if err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return "", fmt.Errorf("failed to open a UDP socket to %s: %w", dst, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("ping")); err != nil {
		time.Sleep(100 * time.Millisecond)
		return "", err
	}
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 2048)
	n, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	src, payload, _ := strings.Cut(string(buf[:n]), " ")
	if payload != "ping" {
		return "", fmt.Errorf("unexpected echo from %s: %q", dst, buf[:n])
	}
	return src, nil
}
