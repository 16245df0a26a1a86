package packets

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// TCPListen accepts TCP connections on [::]:port (both families) in the
// namespace at nsPath, and closes each at once, until the listener is
// closed: a backend whose only answer is the handshake.
func TCPListen(nsPath string, port int) (net.Listener, error) {
	var ln net.Listener
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	return ln, nil
}

// TCPHandshake opens a TCP connection in the namespace at nsPath from src
// (with zone, the link of a link-local address; "" for none) to dst, and
// reports whether the handshake completed within timeout. The error is the
// namespace's, not the connection's: an unanswered SYN is (false, nil).
func TCPHandshake(nsPath string, src netip.Addr, zone string, dst netip.AddrPort, timeout time.Duration) (bool, error) {
	answered := false
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.IP(src.AsSlice()), Zone: zone}}
		conn, err := d.Dial("tcp", dst.String())
		if err == nil {
			conn.Close()
			answered = true
		}
		return nil
	})
	return answered, err
}
