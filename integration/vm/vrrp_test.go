package vm

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/packets"
	"github.com/podwire/podwire/pkg/vrrp"
)

// VRRP failover on a VLAN: the routers of virtual router 7 on VLAN 100 are
// pods of namespace nf, granted VRID 7 by the config; the client is on the
// switch side of the uplink. The pods play VRRP's part themselves (the
// master holds the virtual address on an interface whose MAC is the
// virtual MAC, RFC 5798 7.3, and announces it with a gratuitous ARP); the
// test plays the election.

const (
	vrrpVIP    = "192.0.2.50"
	vrrpClient = "192.0.2.200"
)

// vrrpConf grants VLAN 100 to namespace nf with its subnet and VRID 7, and
// forwarding to nf.
func vrrpConf() map[string]any {
	return map[string]any{"bridge": "podwire0", "uplink": "uplink0",
		"vlanGrants": []map[string]any{{"vlans": "100", "namespaces": []string{"nf"},
			"subnets": []string{"192.0.2.0/24"}, "vrrp": "7"}},
		"forwarding": map[string]any{"namespaces": []string{"nf"}}}
}

// becomeMaster makes p the master of VRID 7 as a VRRP router does: the
// virtual address on net1, the virtual MAC on net1, and a gratuitous ARP
// for the virtual address from it, which moves the bridge's forwarding
// entry of the virtual MAC to p's port.
func becomeMaster(t *testing.T, p *cnitest.Pod) {
	t.Helper()
	addAddr(t, p.NS, "net1", vrrpVIP+"/24")
	setMAC(t, p, "net1", vrrp.MAC(7, false))
	if err := packets.SendGratuitousARP(p.NS.Path(), "net1", netip.MustParseAddr(vrrpVIP)); err != nil {
		t.Fatal(err)
	}
}

// linkDown sets ifName of p down: the router stops.
func linkDown(t *testing.T, p *cnitest.Pod, ifName string) {
	t.Helper()
	err := p.NS.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(ifName)
		if err != nil {
			return err
		}
		return netlink.LinkSetDown(l)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// isEchoRequestTo matches an IPv4 ICMP echo request to dst.
func isEchoRequestTo(dst net.IP) func([]byte) bool {
	return func(f []byte) bool {
		return len(f) >= 42 && f[12] == 0x08 && f[13] == 0x00 && f[14+9] == 1 && bytes.Equal(f[30:34], dst.To4()) && f[34] == 8
	}
}

// vrrpMACSet opens an nftables connection in n and finds the port check's
// vrrp-mac set; the connection is closed when t ends.
func vrrpMACSet(t *testing.T, n *node) (*nftables.Conn, *nftables.Set) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(n.NS.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseLasting() })
	s, err := c.GetSetByName(&nftables.Table{Family: nftables.TableFamilyBridge, Name: "podwire-port"}, "vrrp-mac")
	if err != nil {
		t.Fatalf("set vrrp-mac of bridge podwire-port: %v", err)
	}
	return c, s
}

// vrrpMACElements is the number of elements of the port check's vrrp-mac
// set in n.
func vrrpMACElements(t *testing.T, n *node) int {
	t.Helper()
	c, s := vrrpMACSet(t, n)
	els, err := c.GetSetElements(s)
	if err != nil {
		t.Fatal(err)
	}
	return len(els)
}

// flushVRRPMACs empties the port check's vrrp-mac set in n, as another
// owner of the ruleset could.
func flushVRRPMACs(t *testing.T, n *node) {
	t.Helper()
	c, s := vrrpMACSet(t, n)
	c.FlushSet(s)
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestVRRPFailover: forwarding pods A and B granted VRID 7 hold the
// virtual address in turn; the client on the switch reaches it through A,
// then through B within 3 s of A stopping, then through C, an ordinary
// (port-checked) pod with the same grant. Pod R of the same namespace and
// VLAN, forwarding but without the grant, that sends from the virtual MAC
// reaches nobody: the client never sees its frame. CHECK fails once the
// port's virtual-MAC element is gone. A VRID the grant does not list is
// refused, leaving nothing.
func TestVRRPFailover(t *testing.T) {
	require(t, capVLANFiltering)
	n := newNode(t, vrrpConf())
	far := addUplink(t, n, "uplink0")
	clientIf := addVLANIf(t, far, "eth0", 100, vrrpClient+"/24")

	router := func(name, ip string, extra map[string]string) *cnitest.Pod {
		ann := map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": ip + "/24"}
		for k, v := range extra {
			ann[k] = v
		}
		return n.mustAddPodIn("nf", name, ann)
	}
	group := map[string]string{"podwire.io/forwarding": "true", "podwire.io/vrrp": "7=" + vrrpVIP}
	a := router("router-a", "192.0.2.1", group)
	b := router("router-b", "192.0.2.2", group)
	c := router("router-c", "192.0.2.3", map[string]string{"podwire.io/vrrp": "7=" + vrrpVIP})
	r := router("rogue", "192.0.2.9", map[string]string{"podwire.io/forwarding": "true"})
	if got := vrrpMACElements(t, n); got != 3 {
		t.Errorf("vrrp-mac holds %d elements, want 3 (one per granted pod)", got)
	}

	// A is master: the client resolves the virtual address to the virtual
	// MAC, on A's port.
	becomeMaster(t, a)
	seenA := capturePackets(t, a.NS, "net1")
	mustPing(t, far, "client to the virtual address held by A", vrrpVIP)
	mustSee(t, seenA, "the client's echo request at A", isEchoRequestTo(net.ParseIP(vrrpVIP)))
	if mac, err := cnitest.NeighbourMAC(far, clientIf, netip.MustParseAddr(vrrpVIP)); err != nil || mac.String() != vrrp.MAC(7, false).String() {
		t.Errorf("client's neighbour entry for %s: %v %v, want the virtual MAC %s", vrrpVIP, mac, err, vrrp.MAC(7, false))
	}

	// A stops, B takes over; then B stops and C, whose port is checked
	// (pinned to its MAC and addresses, the virtual ones joined), takes over.
	for _, step := range []struct {
		from, to *cnitest.Pod
		name     string
	}{{a, b, "forwarding pod B"}, {b, c, "ordinary pod C"}} {
		linkDown(t, step.from, "net1")
		start := time.Now()
		becomeMaster(t, step.to)
		seen := capturePackets(t, step.to.NS, "net1")
		if err := ping(far, net.ParseIP(vrrpVIP), 3*time.Second); err != nil {
			t.Fatalf("failover to %s: the client does not reach %s within 3 s: %v", step.name, vrrpVIP, err)
		}
		took := time.Since(start)
		t.Logf("failover to %s: the client reached %s %d ms after the master stopped", step.name, vrrpVIP, took.Milliseconds())
		if took > 3*time.Second {
			t.Errorf("failover to %s took %s, want at most 3 s", step.name, took)
		}
		mustSee(t, seen, "the client's echo request at "+step.name, isEchoRequestTo(net.ParseIP(vrrpVIP)))
	}

	// R, without the grant, reaches the client from its own MAC, then
	// sends from the virtual MAC: the client never sees that frame. A
	// static neighbour entry stands in for ARP, so that only the IP
	// packet is in play.
	mustPing(t, r.NS, "pod R to the client from its own MAC", vrrpClient)
	var clientMAC net.HardwareAddr
	far.Do(func(ns.NetNS) error {
		itf, err := net.InterfaceByName(clientIf)
		if err == nil {
			clientMAC = itf.HardwareAddr
		}
		return err
	})
	setMAC(t, r, "net1", vrrp.MAC(7, false))
	seenClient := capturePackets(t, far, clientIf)
	staticNeigh(t, r.NS, "net1", vrrpClient, clientMAC)
	_ = ping(r.NS, net.ParseIP(vrrpClient), time.Second)
	fromR := func(f []byte) bool {
		return bytes.Equal(f[6:12], vrrp.MAC(7, false)) && isEchoRequestFrom(net.ParseIP("192.0.2.9"))(f)
	}
	if seenClient.WaitFor(2*time.Second, fromR) {
		t.Errorf("the client received pod R's echo request from the virtual MAC: the pod has no grant")
	}
	mustPing(t, far, "client to the virtual address held by C, after R's attempt", vrrpVIP)

	// A VRID outside the grant is refused, naming the annotation.
	_, err := n.addPodIn("nf", "router-x", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.8/24",
		"podwire.io/forwarding": "true", "podwire.io/vrrp": "8=" + vrrpVIP})
	if err == nil || cniCode(err) != 7 || !strings.Contains(err.Error(), "podwire.io/vrrp") || !strings.Contains(err.Error(), "VRID 8") {
		t.Errorf("ADD with VRID 8: got %v, want CNI error 7 naming podwire.io/vrrp and VRID 8", err)
	}

	// The virtual address is claimed on VLAN 100: a pod that asks for it as
	// its static address is refused (and leaves nothing, checked below).
	_, err = n.addPodIn("nf", "squatter", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": vrrpVIP + "/24"})
	if err == nil || cniCode(err) != 7 || !strings.Contains(err.Error(), "podwire.io/vlan-ips") || !strings.Contains(err.Error(), "VRID 7") {
		t.Errorf("ADD with the virtual address as a static address: got %v, want CNI error 7 naming podwire.io/vlan-ips and VRID 7", err)
	}

	// podwire's CHECK of C (CheckLast: ptp's own CHECK refuses a result
	// with VLAN addresses) finds its port's virtual-MAC element, and fails
	// naming the set once another owner has flushed it; DEL still removes
	// the rest.
	if err := c.CheckLast(); err != nil {
		t.Fatalf("CHECK of pod C: %v", err)
	}
	flushVRRPMACs(t, n)
	if err := c.CheckLast(); err == nil || !strings.Contains(err.Error(), "set vrrp-mac") {
		t.Errorf("CHECK of pod C with its vrrp-mac element flushed: %v, want an error naming set vrrp-mac", err)
	}

	for _, p := range []*cnitest.Pod{a, b, c, r} {
		if err := p.Del(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	if left := n.leftovers(); len(left) > 0 {
		t.Errorf("left behind after DEL: %v", left)
	}
	if got := vrrpMACElements(t, n); got != 0 {
		t.Errorf("vrrp-mac holds %d elements after every pod's DEL, want 0", got)
	}
}

// TestVRRPFailoverIPv6: the same with an IPv6 virtual address: the master
// carries the IPv6 virtual MAC (RFC 5798 7.3, 00-00-5E-00-02-{VRID}) and
// announces the address with an unsolicited neighbour advertisement.
// Forwarding pod A, then ordinary pod B, whose port is checked (the MAC pin
// takes the virtual MAC, port-v6 the virtual address), answer the client.
func TestVRRPFailoverIPv6(t *testing.T) {
	require(t, capVLANFiltering)
	const vip, client = "2001:db8:100::50", "2001:db8:100::200"
	conf := vrrpConf()
	conf["vlanGrants"] = []map[string]any{{"vlans": "100", "namespaces": []string{"nf"},
		"subnets": []string{"2001:db8:100::/64"}, "vrrp": "7"}}
	n := newNode(t, conf)
	far := addUplink(t, n, "uplink0")
	clientIf := addVLANIf(t, far, "eth0", 100, client+"/64")
	group := "7=" + vip
	a := n.mustAddPodIn("nf", "router-a", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "2001:db8:100::1/64",
		"podwire.io/forwarding": "true", "podwire.io/vrrp": group})
	b := n.mustAddPodIn("nf", "router-b", map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "2001:db8:100::2/64",
		"podwire.io/vrrp": group})
	vmac := vrrp.MAC(7, true)
	master := func(p *cnitest.Pod) {
		t.Helper()
		addAddr(t, p.NS, "net1", vip+"/64")
		setMAC(t, p, "net1", vmac)
		if err := packets.SendNeighborAdvert(p.NS.Path(), "net1", netip.MustParseAddr(vip), netip.MustParseAddr(vip)); err != nil {
			t.Fatal(err)
		}
	}

	master(a)
	mustPing(t, far, "client to the IPv6 virtual address held by A", vip)
	if mac, err := cnitest.NeighbourMAC(far, clientIf, netip.MustParseAddr(vip)); err != nil || mac.String() != vmac.String() {
		t.Errorf("client's neighbour entry for %s: %v %v, want the IPv6 virtual MAC %s", vip, mac, err, vmac)
	}
	linkDown(t, a, "net1")
	master(b)
	if err := ping(far, net.ParseIP(vip), 3*time.Second); err != nil {
		t.Fatalf("failover to ordinary pod B: the client does not reach %s within 3 s: %v", vip, err)
	}
	if err := b.CheckLast(); err != nil {
		t.Errorf("CHECK of master B: %v", err)
	}

	for _, p := range []*cnitest.Pod{a, b} {
		if err := p.Del(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	if left := n.leftovers(); len(left) > 0 {
		t.Errorf("left behind after DEL: %v", left)
	}
}
