package integration

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// spoofSetup gives an ordinary pod an extra address it does not own (v4 or
// v6) and the node a route back to it through the pod, so that the kernel's
// reverse-path filter would pass it: only podwire's check can drop it.
func spoofSetup(t *testing.T, n *node, p *pod, v6 bool) netip.Addr {
	t.Helper()
	spoof := netip.MustParseAddr("10.99.0.5")
	cmds := [][]string{{"ip", "addr", "add", "10.99.0.5/32", "dev", "eth0"}}
	route := []string{"ip", "route", "add", "10.99.0.5/32", "via", p.v4.String(), "dev", p.hostIf()}
	if v6 {
		spoof = netip.MustParseAddr("fd99::5")
		cmds = [][]string{{"ip", "-6", "addr", "add", "fd99::5/128", "dev", "eth0", "nodad"}}
		route = []string{"ip", "-6", "route", "add", "fd99::5/128", "via", p.v6.String(), "dev", p.hostIf()}
	}
	doIn(t, p.NS, cmds)
	n.Do(func() error { return runAll([][]string{route}) })
	return spoof
}

// TestSourceCheckDropsSpoof: an ordinary pod's own traffic passes the node,
// traffic from an address it does not own is dropped even though the node
// routes that address to the pod; with sourceCheck false the same spoof
// passes, so the drop is podwire's.
func TestSourceCheckDropsSpoof(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(famName(v6), func(t *testing.T) {
			for _, check := range []bool{true, false} {
				n := newNode(t)
				be := n.newBackend()
				srv := listenTCP(t, be.ns, "[::]:0")
				dst := netip.AddrPortFrom(be.v4, srv.port())
				if v6 {
					dst = netip.AddrPortFrom(be.v6, srv.port())
				}
				p := n.mustAddPod(podSpec{podwire: map[string]any{"sourceCheck": check}})
				if err := eventually(3*time.Second, func() error { return dialTCP(p.NS, p.addr(v6), dst, time.Second) }); err != nil {
					t.Fatalf("sourceCheck %v: pod's own traffic from %s: %v", check, p.addr(v6), err)
				}
				spoof := spoofSetup(t, n, p, v6)
				err := dialTCP(p.NS, spoof, dst, time.Second)
				if !check && err != nil {
					// What must pass gets the same patience as the
					// pod's own traffic above: one lost SYN (a busy
					// machine, a neighbour entry being re-probed for
					// the route back via the pod) costs exactly the
					// 1 s of a single attempt.
					err = eventually(3*time.Second, func() error { return dialTCP(p.NS, spoof, dst, time.Second) })
				}
				if check && err == nil {
					t.Fatalf("spoofed source %s passed the node with sourceCheck on", spoof)
				}
				if !check && err != nil {
					t.Fatalf("spoofed source %s dropped with sourceCheck false (so not by podwire): %v", spoof, err)
				}
				if check && srv.sawPeer(spoof) {
					t.Fatalf("server saw the spoofed source %s", spoof)
				}
			}
		})
	}
}

// TestSourceCheckAllowsLinkLocal: an ordinary pod's IPv6 link-local traffic
// (what neighbour discovery uses) passes the check: a TCP handshake from the
// pod's fe80:: address to the node's link-local address on the pod's veth.
func TestSourceCheckAllowsLinkLocal(t *testing.T) {
	n := newNode(t)
	p := n.mustAddPod(podSpec{})
	var ll netip.Addr
	n.Do(func() error {
		return eventually(5*time.Second, func() error {
			l, err := netlinksafe.LinkByName(p.hostIf())
			if err != nil {
				return err
			}
			addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_V6)
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if ip, _ := netip.AddrFromSlice(a.IP); ip.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
					ll = ip
					return nil
				}
			}
			return fmt.Errorf("no usable link-local address on %s yet", p.hostIf())
		})
	})
	srv := listenTCP(t, n.NS, "[::]:0")
	dst := netip.AddrPortFrom(ll.WithZone("eth0"), srv.port())
	if err := eventually(5*time.Second, func() error { return dialTCP(p.NS, netip.Addr{}, dst, time.Second) }); err != nil {
		t.Fatalf("link-local TCP from the pod to %s: %v", dst, err)
	}
	for _, peer := range srv.peers {
		if !peer.IsLinkLocalUnicast() {
			t.Fatalf("the node saw %s, not the pod's link-local address", peer)
		}
	}
}

// TestSourceCheckInStock031Chain: in a chain at cniVersion 0.3.1 (what the
// flannel, Calico and Cilium installers write) podwire wires the pod: its
// own traffic passes, a spoofed source is dropped, and both of a runtime's
// DELs (the second without netns and prevResult) succeed.
func TestSourceCheckInStock031Chain(t *testing.T) {
	n := newNode(t)
	be := n.newBackend()
	srv := listenTCP(t, be.ns, "[::]:0")
	dst := netip.AddrPortFrom(be.v4, srv.port())
	p := n.mustAddPod(podSpec{version: "0.3.1"})
	if p.Version != "0.3.1" {
		t.Fatalf("result cniVersion %q, want 0.3.1", p.Version)
	}
	if err := eventually(3*time.Second, func() error { return dialTCP(p.NS, p.v4, dst, time.Second) }); err != nil {
		t.Fatalf("pod's own traffic from %s: %v", p.v4, err)
	}
	spoof := spoofSetup(t, n, p, false)
	if err := dialTCP(p.NS, spoof, dst, time.Second); err == nil || srv.sawPeer(spoof) {
		t.Fatalf("spoofed source %s passed the node in a 0.3.1 chain", spoof)
	}
	if err := p.Del(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if err := p.DelNoNetns(); err != nil {
		t.Fatalf("second DEL without netns and prevResult: %v", err)
	}
	n.mustRecords(t, 0, "after DEL")
}
