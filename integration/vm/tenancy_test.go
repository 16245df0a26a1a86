package vm

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/packets"
	"golang.org/x/sys/unix"
)

// tenancyConf grants VLAN 100 to namespace team-a with subnet 192.0.2.0/24,
// its gateway 192.0.2.254 excluded, and keeps VLAN 200 in the deprecated
// allowedVLANs (every namespace, any address, MAC-pinned ports).
func tenancyConf() map[string]any {
	return map[string]any{"bridge": "podwire0", "uplink": "uplink0", "allowedVLANs": "200",
		"vlanGrants": []map[string]any{{"vlans": "100", "namespaces": []string{"team-a"},
			"subnets": []string{"192.0.2.0/24"}, "exclude": []string{"192.0.2.254/32"}}}}
}

// addPodIn is addPod for a pod of Kubernetes namespace k8sNS named name.
func (n *node) addPodIn(k8sNS, name string, annotations map[string]string) (*cnitest.Pod, error) {
	return n.addPodArgs("1.1.0", cnitest.PodArgs{Namespace: k8sNS, Name: name, Annotations: annotations})
}

func (n *node) mustAddPodIn(k8sNS, name string, annotations map[string]string) *cnitest.Pod {
	n.t.Helper()
	p, err := n.addPodIn(k8sNS, name, annotations)
	if err != nil {
		n.t.Fatalf("ADD %s/%s %v: %v\nlog:\n%s", k8sNS, name, annotations, err, n.Log())
	}
	return p
}

// isARPFrom matches an ARP packet (request or reply) whose sender IP is ip.
func isARPFrom(ip net.IP) func([]byte) bool {
	ip4 := ip.To4()
	return func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_ARP && bytes.Equal(f[28:32], ip4)
	}
}

// TestVLANTenancy: a VLAN granted to team-a is refused to team-b; an
// address another pod holds and the excluded gateway are refused, leaving
// nothing; a team-a pod that asked for no address cannot claim the gateway
// on the wire (neither IP nor ARP from it reaches a neighbour), while an
// honest pod's ARP does; on an allowedVLANs VLAN a pod without addresses
// sends from any address but only from its own MAC.
func TestVLANTenancy(t *testing.T) {
	require(t, capVLANFiltering)
	n := newNode(t, tenancyConf())
	addUplink(t, n, "uplink0")

	refused := func(k8sNS, name string, ann map[string]string, mention ...string) {
		t.Helper()
		_, err := n.addPodIn(k8sNS, name, ann)
		if err == nil || cniCode(err) != 7 {
			t.Fatalf("ADD %s/%s %v: %v, want CNI error 7", k8sNS, name, ann, err)
		}
		for _, m := range mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("refusal %q does not name %s", err, m)
			}
		}
	}
	refused("team-b", "x", map[string]string{"podwire.io/vlan": "100"}, "podwire.io/vlan", "vlanGrants", "team-b")
	if l := n.leftovers(); len(l) != 0 {
		t.Fatalf("left behind by a refused VLAN: %v", l)
	}

	a := n.mustAddPodIn("team-a", "a", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.1/24"})
	b := n.mustAddPodIn("team-a", "b", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.2/24"})
	refused("team-a", "thief", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.1/24"},
		"podwire.io/vlan-ips", "192.0.2.1", "team-a/a", "team-a/thief")
	refused("team-a", "gw", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.254/24"},
		"podwire.io/vlan-ips", "192.0.2.254", "excluding 192.0.2.254/32")
	if l := n.leftovers(); len(l) != 4 {
		t.Fatalf("links and records after the refusals: %v, want a's and b's only", l)
	}
	mustPing(t, a.NS, "a to b on VLAN 100", "192.0.2.2")

	// s asked for no address: its port passes no IP source and no ARP
	// sender but ARP probes.
	s := n.mustAddPodIn("team-a", "s", map[string]string{"podwire.io/vlan": "100"})
	seen := capturePackets(t, b.NS, "net1")
	if err := packets.SendGratuitousARP(a.NS.Path(), "net1", netip.MustParseAddr("192.0.2.1")); err != nil {
		t.Fatal(err)
	}
	mustSee(t, seen, "a's ARP for its own address", isARPFrom(net.ParseIP("192.0.2.1")))
	if err := packets.SendGratuitousARP(s.NS.Path(), "net1", netip.MustParseAddr("192.0.2.254")); err != nil {
		t.Fatal(err)
	}
	spoofFrom(t, s, "192.0.2.254", "192.0.2.2", podMAC(t, b, "net1"))
	if seen.WaitFor(2*time.Second, isARPFrom(net.ParseIP("192.0.2.254"))) {
		t.Fatal("b received s's ARP claiming the gateway 192.0.2.254")
	}
	if seen.WaitFor(time.Second, isEchoRequestFrom(net.ParseIP("192.0.2.254"))) {
		t.Fatal("b received an echo request from s with the gateway's address")
	}

	// VLAN 200 (allowedVLANs): addresses are the pods' own, the MAC is
	// pinned.
	l := n.mustAddPodIn("other", "l", map[string]string{"podwire.io/vlan": "200"})
	m := n.mustAddPodIn("other", "m", map[string]string{"podwire.io/vlan": "200"})
	addAddr(t, l.NS, "net1", "198.51.100.1/24")
	addAddr(t, m.NS, "net1", "198.51.100.2/24")
	mustPing(t, l.NS, "a pod without vlan-ips from an address of its own choosing", "198.51.100.2")
	setMAC(t, l, "net1", net.HardwareAddr{0x02, 0, 0, 0, 0x66, 0x67})
	atM := capturePackets(t, m.NS, "net1")
	_ = pingFrom(l.NS, net.ParseIP("198.51.100.1"), net.ParseIP("198.51.100.2"), time.Second)
	if atM.WaitFor(2*time.Second, isEchoRequestFrom(net.ParseIP("198.51.100.1"))) {
		t.Fatal("m received an echo request from l's forged MAC")
	}
}

// TestVLANGrantsOnly: a node whose VLANs are all granted (no allowedVLANs)
// gets the bridge port check too: a granted pod's forged source is dropped.
func TestVLANGrantsOnly(t *testing.T) {
	require(t, capVLANFiltering)
	c := tenancyConf()
	delete(c, "allowedVLANs")
	n := newNode(t, c)
	addUplink(t, n, "uplink0")
	a := n.mustAddPodIn("team-a", "a", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.1/24"})
	b := n.mustAddPodIn("team-a", "b", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.2/24"})
	mustPing(t, a.NS, "a to b on a granted VLAN", "192.0.2.2")
	seen := capturePackets(t, b.NS, "net1")
	spoofFrom(t, a, "192.0.2.66", "192.0.2.2", podMAC(t, b, "net1"))
	if seen.WaitFor(2*time.Second, isEchoRequestFrom(net.ParseIP("192.0.2.66"))) {
		t.Fatal("b received an echo request from a's forged source 192.0.2.66")
	}
}
