// Package packets sends and receives real UDP datagrams inside network
// namespaces for the integration suites (integration/cri, integration/k8s):
// listeners, an echo server, a sink that records sources, and a sender that
// forges its source address as a router forwarding someone else's packet
// would.
package packets

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

// Listen opens a UDP socket in the namespace at nsPath bound to [::]:port
// (both families). The socket stays in that namespace.
func Listen(nsPath string, port int) (*net.UDPConn, error) {
	var conn *net.UDPConn
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		conn, err = net.ListenUDP("udp", &net.UDPAddr{Port: port})
		return err
	})
	return conn, err
}

// ListenAddr opens a UDP socket in the namespace at nsPath bound to addr,
// so that answers leave from the address the client dialed.
func ListenAddr(nsPath string, addr netip.AddrPort) (*net.UDPConn, error) {
	var conn *net.UDPConn
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	})
	return conn, err
}

// Echo answers every datagram on conn with its payload, prefixed with the
// source address the echoer saw, until conn is closed.
func Echo(conn *net.UDPConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		conn.WriteToUDPAddrPort([]byte(from.Addr().Unmap().String()+" "+string(buf[:n])), from)
	}
}

// EchoServer runs Echo on a socket bound to addr in the namespace at
// nsPath (ListenAddr: its answers leave from the address the client
// dialed; the unspecified [::] listens on both families) until t ends. A
// failure to listen fails t: test goroutine only.
func EchoServer(t testing.TB, nsPath string, addr netip.AddrPort) {
	t.Helper()
	conn, err := ListenAddr(nsPath, addr)
	if err != nil {
		t.Fatalf("failed to listen on UDP %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	go Echo(conn)
}

// Exchange sends a datagram from the namespace at nsPath to an Echo server
// at dst and waits for the echo; it retries while neighbours and DAD
// settle, with a new socket each time (a connected socket keeps the source
// chosen while the node's addresses were still tentative). It returns the
// source the echoer saw.
func Exchange(nsPath string, dst netip.AddrPort, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		src, err := exchangeOnce(nsPath, dst)
		if err == nil {
			return src, nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("no echo from %s within %v: %w", dst, timeout, lastErr)
}

func exchangeOnce(nsPath string, dst netip.AddrPort) (string, error) {
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

// Sink records the sources of the datagrams that reach a UDP socket.
type Sink struct {
	conn *net.UDPConn
	mu   sync.Mutex
	seen map[string]bool // "source payload"
}

// NewSink listens on [::]:port in the namespace at nsPath until Close.
func NewSink(nsPath string, port int) (*Sink, error) {
	conn, err := Listen(nsPath, port)
	if err != nil {
		return nil, err
	}
	s := &Sink{conn: conn, seen: map[string]bool{}}
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

// Close closes the sink's socket.
func (s *Sink) Close() { s.conn.Close() }

// Got reports whether a datagram with payload from src arrived.
func (s *Sink) Got(src netip.Addr, payload string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[src.String()+" "+payload]
}

// WaitGot waits up to timeout for a datagram with payload from src.
func (s *Sink) WaitGot(src netip.Addr, payload string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if s.Got(src, payload) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s.Got(src, payload)
}

// From lists the sources of the datagrams with payload that arrived
// (whatever a NAT on the way made of them), in no particular order.
func (s *Sink) From(payload string) []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []netip.Addr
	for k := range s.seen {
		if src, p, _ := strings.Cut(k, " "); p == payload {
			if a, err := netip.ParseAddr(src); err == nil {
				out = append(out, a)
			}
		}
	}
	return out
}

// SendFrom sends count datagrams with payload from src (any address: the
// socket is transparent and freebind, as a router forwarding someone else's
// packet would send it) to dst, inside nsPath. EPERM from sendto (a
// firewall dropping the packet) is not an error: the receiver decides.
func SendFrom(nsPath string, src netip.Addr, dst netip.AddrPort, payload string, count int) error {
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
