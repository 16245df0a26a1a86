package vm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/cnitest"
)

// isEchoRequestFrom matches an IPv4 ICMP echo request with source src.
func isEchoRequestFrom(src net.IP) func([]byte) bool {
	return func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_IP &&
			f[14+9] == unix.IPPROTO_ICMP && bytes.Equal(f[26:30], src.To4()) && f[34] == 8
	}
}

// podMAC is the MAC of the pod's interface ifName from its CNI result.
func podMAC(t *testing.T, p *cnitest.Pod, ifName string) net.HardwareAddr {
	t.Helper()
	for _, itf := range p.Result.Interfaces {
		if itf.Name == ifName && itf.Sandbox != "" {
			mac, err := net.ParseMAC(itf.Mac)
			if err != nil {
				t.Fatalf("result MAC %q of %s: %v", itf.Mac, ifName, err)
			}
			return mac
		}
	}
	t.Fatalf("result has no %s in a sandbox: %+v", ifName, p.Result.Interfaces)
	return nil
}

// setMAC gives the pod's interface ifName the address mac, as a pod
// forging its source MAC does.
func setMAC(t *testing.T, p *cnitest.Pod, ifName string, mac net.HardwareAddr) {
	t.Helper()
	err := p.NS.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(ifName)
		if err != nil {
			return err
		}
		return netlink.LinkSetHardwareAddr(l, mac)
	})
	if err != nil {
		t.Fatalf("MAC %s on %s: %v", mac, ifName, err)
	}
}

// spoofFrom makes the pod send from src: the address is added to net1 (as
// a spoofing pod would) and a static neighbour entry for dst stands in for
// ARP, so that only the spoofed IP packet is in play.
func spoofFrom(t *testing.T, p *cnitest.Pod, src string, dst string, dstMAC net.HardwareAddr) {
	t.Helper()
	addAddr(t, p.NS, "net1", src+"/32")
	staticNeigh(t, p.NS, "net1", dst, dstMAC)
	_ = pingFrom(p.NS, net.ParseIP(src), net.ParseIP(dst), time.Second)
}

// TestVLANPortCheckSpoofing: on VLAN 100, an ordinary pod with static
// addresses can send only from them (the bridge port check drops the rest),
// a forwarding pod can send any source.
func TestVLANPortCheckSpoofing(t *testing.T) {
	require(t, capVLANFiltering)
	n := newNode(t, vlanConf(map[string]any{"forwarding": map[string]any{"namespaces": []string{"default"}}}))
	addUplink(t, n, "uplink0")
	b := n.mustAddPod(map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.2/24"})
	a := n.mustAddPod(map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.1/24"})
	f := n.mustAddPod(map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.9/24",
		"podwire.io/forwarding": "true"})

	mustPing(t, a.NS, "ordinary pod from its own address", "192.0.2.2")
	mustPing(t, f.NS, "forwarding pod from its own address", "192.0.2.2")
	bMAC := podMAC(t, b, "net1")

	seen := capturePackets(t, b.NS, "net1")
	for i := range 3 {
		spoofFrom(t, a, fmt.Sprintf("192.0.2.%d", 66+i), "192.0.2.2", bMAC)
	}
	for i := range 3 {
		if seen.WaitFor(time.Second, isEchoRequestFrom(net.IPv4(192, 0, 2, byte(66+i)))) {
			t.Fatalf("b received an echo request from spoofed 192.0.2.%d of an ordinary pod", 66+i)
		}
	}
	spoofFrom(t, f, "192.0.2.77", "192.0.2.2", bMAC)
	mustSee(t, seen, "the forwarding pod's packet from 192.0.2.77", isEchoRequestFrom(net.ParseIP("192.0.2.77")))

	// A forged source MAC with the pod's own address is dropped too.
	setMAC(t, a, "net1", net.HardwareAddr{0x02, 0, 0, 0, 0x66, 0x66})
	mustNotPing(t, a.NS, "ordinary pod with a forged MAC", "192.0.2.2")
	if err := a.CheckLast(); err == nil || !strings.Contains(err.Error(), "MAC") {
		t.Errorf("CHECK after the MAC change: got %v, want an error naming the MAC", err)
	}
}
