package integration

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/internal/testns"
)

// frameCapture is a packet socket receiving every frame of every interface
// of one netns (those made later too) from the moment it is opened.
type frameCapture struct{ fd int }

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// captureFrames opens a capture in netns, closed when t ends.
func captureFrames(t *testing.T, netns ns.NetNS) *frameCapture {
	t.Helper()
	c := &frameCapture{fd: -1}
	err := netns.Do(func(ns.NetNS) error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		c.fd = fd
		tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	if err != nil {
		t.Fatalf("failed to open a capture: %v", err)
	}
	t.Cleanup(func() { unix.Close(c.fd) })
	return c
}

// drain returns the frames received until nothing arrived for 50 ms.
func (c *frameCapture) drain() [][]byte {
	var out [][]byte
	for {
		buf := make([]byte, 2048)
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			return out
		}
		out = append(out, buf[:n])
	}
}

// isGratuitousARP matches an ARP packet (request or reply) whose sender and
// target IP are both ip (RFC 5227, 3).
func isGratuitousARP(ip netip.Addr) func([]byte) bool {
	a := ip.As4()
	return func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_ARP &&
			bytes.Equal(f[28:32], a[:]) && bytes.Equal(f[38:42], a[:])
	}
}

// isARPFrom matches any ARP packet with sender IP ip.
func isARPFrom(ip netip.Addr) func([]byte) bool {
	a := ip.As4()
	return func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_ARP && bytes.Equal(f[28:32], a[:])
	}
}

// isNeighborAdvert matches an ICMPv6 neighbour advertisement of target
// (without extension headers: the kernel sends none).
func isNeighborAdvert(target netip.Addr) func([]byte) bool {
	a := target.As16()
	return func(f []byte) bool {
		return len(f) >= 78 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_IPV6 &&
			f[20] == unix.IPPROTO_ICMPV6 && f[54] == 136 && bytes.Equal(f[62:78], a[:])
	}
}

func count(frames [][]byte, match func([]byte) bool) int {
	n := 0
	for _, f := range frames {
		if match(f) {
			n++
		}
	}
	return n
}

// TestNoAnnouncementOnPointToPoint: on a ptp primary the host veth is new
// and has no neighbour entry for the pod, so a gratuitous ARP or unsolicited
// NA would change nothing (arp_accept=0, accept_untracked_na=0): podwire
// sends none. A capture of every interface of the node, open before ADD,
// sees no announcement of the pod's addresses, and does see the pod's ARP
// once the pod talks (the capture works).
func TestNoAnnouncementOnPointToPoint(t *testing.T) {
	n := newNode(t)
	frames := captureFrames(t, n.NS)
	p := n.mustAddPod(podSpec{})
	time.Sleep(300 * time.Millisecond) // anything late from ADD
	got := frames.drain()
	if c := count(got, isGratuitousARP(p.v4)); c != 0 {
		t.Errorf("node saw %d gratuitous ARP for the ptp pod's %s, want 0", c, p.v4)
	}
	if c := count(got, isNeighborAdvert(p.v6)); c != 0 {
		t.Errorf("node saw %d neighbour advertisements of the ptp pod's %s, want 0", c, p.v6)
	}
	gw := p.Result.IPs[0].Gateway
	if err := p.NS.Do(func(ns.NetNS) error { return run("ping", "-c1", "-W1", gw.String()) }); err != nil {
		t.Fatalf("pod to its gateway: %v", err)
	}
	if count(frames.drain(), isARPFrom(p.v4)) == 0 {
		t.Fatalf("the capture did not see the pod's ARP for its gateway: it cannot prove the absence above")
	}
}

// neighbourMAC is the link-layer address of ip in netns's neighbour table on
// ifName, or nil.
var neighbourMAC = cnitest.NeighbourMAC

// podMAC is the MAC of the pod's eth0.
func podMAC(t *testing.T, p *pod) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	if err := p.NS.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName("eth0")
		if err == nil {
			mac = l.Attrs().HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}

// TestBridgedPrimaryNeighbourLearnsReusedIP: with the reference bridge
// plugin as primary (flannel's cni0 works alike), a neighbour on the bridge
// that talked to pod a keeps a's MAC for a's addresses after a is gone. Pod
// b gets the same addresses (host-local ranges of one address each) and a
// new MAC; within 1 s of b's ADD the neighbour's entries hold b's MAC,
// without any traffic to b. The bridge plugin's own arp_notify announces at
// link up, before its port forwards, so this is podwire's announcement.
func TestBridgedPrimaryNeighbourLearnsReusedIP(t *testing.T) {
	n := newNode(t)
	v4, v6 := netip.MustParseAddr("10.244.1.10"), netip.MustParseAddr("fd00:244:1::10")
	n.Base.PrimaryEntry = map[string]any{
		"type":      "bridge",
		"bridge":    "cni0",
		"isGateway": true,
		"mtu":       1500,
		"ipam": map[string]any{
			"type":    "host-local",
			"dataDir": filepath.Join(n.Dir, "ipam"),
			"ranges": []any{
				[]any{map[string]string{"subnet": "10.244.1.0/24", "rangeStart": v4.String(), "rangeEnd": v4.String()}},
				[]any{map[string]string{"subnet": "fd00:244:1::/64", "rangeStart": v6.String(), "rangeEnd": v6.String()}},
			},
		},
	}
	a := n.mustAddPod(podSpec{})
	if a.v4 != v4 || a.v6 != v6 {
		t.Fatalf("pod a got %s and %s, want %s and %s", a.v4, a.v6, v4, v6)
	}

	// The neighbour: a netns on cni0 that talks to a.
	nb := testns.New(t)
	nbPort := "nb" + randHex(4)
	n.Do(func() error {
		if err := run("ip", "link", "add", nbPort, "type", "veth", "peer", "name", "eth0", "netns", nb.Path()); err != nil {
			return err
		}
		return run("ip", "link", "set", nbPort, "master", "cni0", "up")
	})
	if err := nb.Do(func(ns.NetNS) error {
		for _, args := range [][]string{
			{"addr", "add", "10.244.1.200/24", "dev", "eth0"},
			{"addr", "add", "fd00:244:1::200/64", "dev", "eth0", "nodad"},
			{"link", "set", "eth0", "up"},
		} {
			if err := run("ip", args...); err != nil {
				return err
			}
		}
		return eventually(5*time.Second, func() error {
			if err := run("ping", "-c1", "-W1", v4.String()); err != nil {
				return err
			}
			return run("ping", "-c1", "-W1", v6.String())
		})
	}); err != nil {
		t.Fatalf("neighbour to pod a: %v", err)
	}
	macA := podMAC(t, a)
	for _, ip := range []netip.Addr{v4, v6} {
		if mac, err := neighbourMAC(nb, "eth0", ip); err != nil || mac.String() != macA.String() {
			t.Fatalf("neighbour's entry for %s is %v (%v), want a's %s", ip, mac, err, macA)
		}
	}
	if err := a.Del(); err != nil {
		t.Fatalf("DEL a: %v", err)
	}
	a.ReleaseNS()

	b := n.mustAddPod(podSpec{})
	added := time.Now()
	if b.v4 != v4 || b.v6 != v6 {
		t.Fatalf("pod b got %s and %s, want the reused %s and %s", b.v4, b.v6, v4, v6)
	}
	macB := podMAC(t, b)
	if macB.String() == macA.String() {
		t.Fatalf("pods a and b have the same MAC %s: the test proves nothing", macA)
	}
	for _, ip := range []netip.Addr{v4, v6} {
		var mac net.HardwareAddr
		var err error
		for {
			mac, err = neighbourMAC(nb, "eth0", ip)
			if err != nil {
				t.Fatal(err)
			}
			if mac.String() == macB.String() || time.Since(added) > time.Second {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if mac.String() != macB.String() {
			t.Errorf("1 s after b's ADD the neighbour's entry for the reused %s is %s, want b's %s\nlog:\n%s",
				ip, mac, macB, n.Log())
		}
	}
	if !t.Failed() {
		t.Logf("the neighbour holds b's MAC for %s and %s %s after ADD", v4, v6, time.Since(added).Round(time.Millisecond))
	}
}
