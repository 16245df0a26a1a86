package k8s

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/packets"
)

// The Azure load-balancer health probe's source (probeSNAT's preset
// "azure"; on AKS it is also the nodes' IPv6 router), and another
// link-local address of the same uplink that no pair rewrites.
var (
	azureProbe   = netip.MustParseAddr("fe80::1234:5678:9abc")
	unpairedLink = netip.MustParseAddr("fe80::4321")
)

// TestProbeSNAT (single-stack IPv6 leg): the health probe, a TCP handshake
// from fe80::1234:5678:9abc on the outside network's uplink, reaches a pod's
// address through the node and is answered: podwire's probe SNAT gives it
// the routable source 2603:1062:0:1:fe80:1234:5678:9abc before routing (the
// kernel forwards nothing from a link-local source) and turns the answer's
// destination back after routing. The control is the same probe on the
// same path from fe80::4321, which no pair rewrites: unanswered. The IPv4
// legs configure no probe pair (the preset is IPv6) and skip, saying so.
func TestProbeSNAT(t *testing.T) {
	needCluster(t)
	if !c.IPv6Only() {
		t.Skip("the Azure probe pair is IPv6: this runs on the single-stack IPv6 leg")
	}
	const port = 8080
	p := runPod(t, "default", "probe-target", nil)
	ln, err := packets.TCPListen(p.netns, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	for _, a := range []netip.Addr{azureProbe, unpairedLink} {
		if err := outsideLinkLocal(t, a); err != nil {
			t.Fatal(err)
		}
	}
	dst := netip.AddrPortFrom(p.ip, port)
	answered, err := packets.TCPHandshake(c.OutsideNetNS, unpairedLink, "eth0", dst, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if answered {
		t.Fatalf("control: the probe from %s (no pair) to %s was answered, so the node forwards link-local sources and this test proves nothing", unpairedLink, dst)
	}
	answered, err = packets.TCPHandshake(c.OutsideNetNS, azureProbe, "eth0", dst, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !answered {
		t.Fatalf("the probe from %s to %s was not answered with probeSNAT (preset azure) on:\n%s", azureProbe, dst, nodeRuleset(t))
	}
	t.Logf("probe from %s to pod %s answered; from %s (no pair) unanswered", azureProbe, dst, unpairedLink)
}

// outsideLinkLocal adds a (link-local, /64) to the outside network's uplink
// until the test ends.
func outsideLinkLocal(t *testing.T, a netip.Addr) error {
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
	change := func(add bool) error {
		return ns.WithNetNSPath(c.OutsideNetNS, func(ns.NetNS) error {
			l, err := netlinksafe.LinkByName("eth0")
			if err != nil {
				return err
			}
			if add {
				return netlink.AddrAdd(l, addr)
			}
			return netlink.AddrDel(l, addr)
		})
	}
	if err := change(true); err != nil {
		return fmt.Errorf("add %s to the outside's uplink: %w", a, err)
	}
	t.Cleanup(func() { change(false) })
	return nil
}
