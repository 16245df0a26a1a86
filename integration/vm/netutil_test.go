package vm

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/internal/testns"
)

// newNS makes a network namespace with lo up that is released (with the
// lazy-unmount fallback) when t ends. Test goroutine only.
func newNS(t testing.TB) ns.NetNS {
	t.Helper()
	n, err := testns.Make()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testns.Release(n) })
	return n
}

// linkUp sets the link name up in the calling thread's netns.
var linkUp = cnitest.LinkUp

// addVeth makes a veth pair with hostName in host and peerName in peer, both up.
func addVeth(t testing.TB, host ns.NetNS, hostName string, peer ns.NetNS, peerName string) {
	t.Helper()
	err := host.Do(func(ns.NetNS) error {
		v := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: hostName},
			PeerName:      peerName,
			PeerNamespace: netlink.NsFd(int(peer.Fd())),
		}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("failed to add veth %q: %w", hostName, err)
		}
		return linkUp(hostName)
	})
	if err == nil {
		err = peer.Do(func(ns.NetNS) error { return linkUp(peerName) })
	}
	if err != nil {
		t.Fatal(err)
	}
}

// staticNeigh sets a permanent neighbour entry ip -> mac on ifName in n,
// standing in for ARP.
func staticNeigh(t *testing.T, n ns.NetNS, ifName, ip string, mac net.HardwareAddr) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(ifName)
		if err != nil {
			return err
		}
		return netlink.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, State: netlink.NUD_PERMANENT,
			IP: net.ParseIP(ip), HardwareAddr: mac})
	})
	if err != nil {
		t.Fatalf("static neighbour %s on %s: %v", ip, ifName, err)
	}
}

// addVLANBridge adds the VLAN-filtering bridge name, up, in n.
func addVLANBridge(t *testing.T, n ns.NetNS, name string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		on := true
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}, VlanFiltering: &on}); err != nil {
			return fmt.Errorf("failed to add bridge %q: %w", name, err)
		}
		return linkUp(name)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addBridgePort makes port, in n, a port of bridge without the bridge's
// default VLAN 1 and a member of vids: tagged (a trunk), or with access
// untagged, the VLAN its PVID.
func addBridgePort(t *testing.T, n ns.NetNS, port, bridge string, access bool, vids ...uint16) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(port)
		if err != nil {
			return err
		}
		br, err := netlinksafe.LinkByName(bridge)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMaster(l, br); err != nil {
			return fmt.Errorf("failed to enslave %q to %q: %w", port, bridge, err)
		}
		if err := netlink.BridgeVlanDel(l, 1, true, true, false, true); err != nil {
			return fmt.Errorf("failed to remove VLAN 1 from %q: %w", port, err)
		}
		for _, vid := range vids {
			if err := netlink.BridgeVlanAdd(l, vid, access, access, false, true); err != nil {
				return fmt.Errorf("failed to add VLAN %d to %q: %w", vid, port, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addAddr adds cidr (address/prefix) to ifname in n without duplicate address detection.
func addAddr(t *testing.T, n ns.NetNS, ifname, cidr string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("failed to find %q: %w", ifname, err)
		}
		a, err := netlink.ParseAddr(cidr)
		if err != nil {
			return err
		}
		a.Flags |= 0x02 // IFA_F_NODAD
		if err := netlink.AddrAdd(l, a); err != nil {
			return fmt.Errorf("failed to add %s to %q: %w", cidr, ifname, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ping sends ICMP echo requests from n to dst every 200 ms until a reply
// arrives or timeout passes. It returns nil on the first reply.
func ping(n ns.NetNS, dst net.IP, timeout time.Duration) error {
	return pingFrom(n, nil, dst, timeout)
}

// pingFrom is ping with the source address src (nil: the kernel's choice).
func pingFrom(n ns.NetNS, src, dst net.IP, timeout time.Duration) error {
	network, laddr, proto := "ip4:icmp", "0.0.0.0", 1
	var reqType, replyType icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if dst.To4() == nil {
		network, laddr, proto = "ip6:ipv6-icmp", "::", 58
		reqType, replyType = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	if src != nil {
		laddr = src.String()
	}
	var c *icmp.PacketConn
	// The socket belongs to the namespace it was made in, whichever thread uses it later.
	err := n.Do(func(ns.NetNS) error {
		var err error
		c, err = icmp.ListenPacket(network, laddr)
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to open an ICMP socket in %s: %w", n.Path(), err)
	}
	defer c.Close()

	id := rand.IntN(0xffff)
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 1500)
	for seq := 1; time.Now().Before(deadline); seq++ {
		msg := icmp.Message{Type: reqType, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("podwire")}}
		b, err := msg.Marshal(nil)
		if err != nil {
			return err
		}
		if _, err := c.WriteTo(b, &net.IPAddr{IP: dst}); err != nil {
			// No route or neighbour yet: keep trying until the deadline.
			time.Sleep(200 * time.Millisecond)
			continue
		}
		wait := time.Now().Add(200 * time.Millisecond)
		for {
			_ = c.SetReadDeadline(wait)
			nr, from, err := c.ReadFrom(buf)
			if err != nil {
				break
			}
			m, err := icmp.ParseMessage(proto, buf[:nr])
			if err != nil || m.Type != replyType {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id && from.(*net.IPAddr).IP.Equal(dst) {
				return nil
			}
		}
	}
	return fmt.Errorf("no echo reply from %s in %s within %s", dst, n.Path(), timeout)
}

// mustPing fails t unless from reaches dst.
func mustPing(t *testing.T, from ns.NetNS, what string, dst string) {
	t.Helper()
	if err := ping(from, net.ParseIP(dst), 10*time.Second); err != nil {
		t.Fatalf("%s: expected %s to answer: %v", what, dst, err)
	}
}

// mustNotPing fails t if from reaches dst within a few seconds.
func mustNotPing(t *testing.T, from ns.NetNS, what string, dst string) {
	t.Helper()
	if err := ping(from, net.ParseIP(dst), 3*time.Second); err == nil {
		t.Fatalf("%s: %s answered but must be unreachable", what, dst)
	}
}
