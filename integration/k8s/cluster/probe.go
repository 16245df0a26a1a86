package cluster

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/packets"
)

// The Azure load-balancer health probe's source (probeSNAT's preset
// "azure"; on AKS it is also the nodes' IPv6 router), and another
// link-local address of the same uplink that no pair rewrites.
var (
	AzureProbe        = netip.MustParseAddr("fe80::1234:5678:9abc")
	UnpairedLinkLocal = netip.MustParseAddr("fe80::4321")
)

// ProbeHandshakes listens on dst's port in the pod's netns (podNetNS),
// puts AzureProbe and UnpairedLinkLocal on the outside network's uplink
// until t ends, and sends a TCP handshake to dst (the pod's IPv6 address)
// from each, through the node: control says whether the one from
// UnpairedLinkLocal was answered within 3 s, probe whether the one from
// AzureProbe was within 5 s. Without a probe SNAT the kernel forwards
// nothing from a link-local source, so only a pair that rewrites it gets
// an answer.
func (c *Cluster) ProbeHandshakes(t testing.TB, podNetNS string, dst netip.AddrPort) (control, probe bool) {
	t.Helper()
	ln, err := packets.TCPListen(podNetNS, int(dst.Port()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	for _, a := range []netip.Addr{AzureProbe, UnpairedLinkLocal} {
		if err := c.outsideLinkLocal(t, a); err != nil {
			t.Fatal(err)
		}
	}
	if control, err = packets.TCPHandshake(c.OutsideNetNS, UnpairedLinkLocal, "eth0", dst, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if probe, err = packets.TCPHandshake(c.OutsideNetNS, AzureProbe, "eth0", dst, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	return control, probe
}

// outsideLinkLocal adds a (link-local, /64, without DAD) to the outside
// network's uplink until t ends.
func (c *Cluster) outsideLinkLocal(t testing.TB, a netip.Addr) error {
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
	change := func(add bool) error {
		return inNetNS(c.OutsideNetNS, func() error {
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
