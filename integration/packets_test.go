package integration

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// tcpServer is a TCP echo listener inside a netns that remembers the peer
// address of every connection it accepted.
type tcpServer struct {
	ln    net.Listener
	mu    sync.Mutex
	peers []netip.Addr
}

// listenTCP listens on addr inside netns until the test ends.
func listenTCP(t *testing.T, netns ns.NetNS, addr string) *tcpServer {
	t.Helper()
	s := &tcpServer{}
	err := netns.Do(func(ns.NetNS) error {
		var err error
		s.ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { s.ln.Close() })
	go func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			ap, _ := netip.ParseAddrPort(c.RemoteAddr().String())
			s.mu.Lock()
			s.peers = append(s.peers, ap.Addr().Unmap())
			s.mu.Unlock()
			go func() {
				defer c.Close()
				_, _ = io.CopyN(c, c, 1)
			}()
		}
	}()
	return s
}

// port is the listener's port.
func (s *tcpServer) port() uint16 {
	return uint16(s.ln.Addr().(*net.TCPAddr).Port)
}

// sawPeer reports whether a connection from a was accepted.
func (s *tcpServer) sawPeer(a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.peers {
		if p == a {
			return true
		}
	}
	return false
}

// dialTCP opens a TCP connection from inside netns, from source src (any
// when invalid; a link-local source needs its zone, "fe80::1%eth0") to dst,
// and exchanges one byte: a completed handshake and a round trip both ways.
func dialTCP(netns ns.NetNS, src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	return netns.Do(func(ns.NetNS) error {
		d := net.Dialer{Timeout: timeout}
		if src.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice(), Zone: src.Zone()}
		}
		c, err := d.Dial("tcp", dst.String())
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		if _, err := c.Write([]byte{'x'}); err != nil {
			return err
		}
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			return fmt.Errorf("no echo from %s: %w", dst, err)
		}
		return nil
	})
}
