package vlan

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/integration/packets"
)

// TestTrunkRouter: a router pod on node 1 with a trunk of VLANs 100 and
// 200 (podwire.io/vlan-trunk, a forwarding pod) routes between them: its
// 802.1Q interfaces net1.100 and net1.200 hold the VLANs' gateways; the
// client on VLAN 100 and a pod on VLAN 200 on node 2 reach each other
// through it, each seeing the other's own address (routed, not NATed),
// both ways: the forwarding and return routes cross the switch twice.
func TestTrunkRouter(t *testing.T) {
	suite.Need(t)
	ensureNamespace(t, vlanNS)
	gw100, gw200 := netip.MustParseAddr("192.0.2.254"), netip.MustParseAddr("198.51.100.254")
	hostIP := netip.MustParseAddr("198.51.100.10")
	createPod(t, vlanNS, "router", c.Nodes[0], map[string]string{
		"podwire.io/vlan-trunk": vlanList(), "podwire.io/forwarding": "true"})
	createPod(t, vlanNS, "vlan200-host", c.Nodes[1], vlanPod(200, hostIP))
	router := readyPod(t, vlanNS, "router", c.Nodes[0])
	host := readyPod(t, vlanNS, "vlan200-host", c.Nodes[1])

	if err := ns.WithNetNSPath(router.netns, func(ns.NetNS) error {
		for _, v := range []struct {
			vid int
			gw  netip.Addr
		}{{100, gw100}, {200, gw200}} {
			if err := addVLANIf(podIf, v.vid, netip.PrefixFrom(v.gw, 24)); err != nil {
				return err
			}
		}
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	}); err != nil {
		t.Fatalf("the router's VLAN interfaces: %v", err)
	}
	route(t, host.netns, vlanSubnet, gw200)
	route(t, clientNS.Path(), vlan200Subnet, gw100)
	t.Cleanup(func() { unroute(t, clientNS.Path(), vlan200Subnet, gw100) })

	packets.EchoServer(t, host.netns, netip.AddrPortFrom(hostIP, echoPort))
	packets.EchoServer(t, clientNS.Path(), netip.AddrPortFrom(clientIP, echoPort))
	if src, err := packets.Exchange(clientNS.Path(), netip.AddrPortFrom(hostIP, echoPort), 20*time.Second); err != nil {
		t.Errorf("the client on VLAN 100 to the VLAN 200 pod on %s through the router on %s: %v", c.Nodes[1].Name, c.Nodes[0].Name, err)
	} else if src != clientIP.String() {
		t.Errorf("the VLAN 200 pod saw the client as %s, want its own %s", src, clientIP)
	}
	if src, err := packets.Exchange(host.netns, netip.AddrPortFrom(clientIP, echoPort), 20*time.Second); err != nil {
		t.Errorf("the VLAN 200 pod to the client through the router: %v", err)
	} else if src != hostIP.String() {
		t.Errorf("the client saw the VLAN 200 pod as %s, want its own %s", src, hostIP)
	}
	if !t.Failed() {
		t.Log("PASS trunk router: VLAN 100 and VLAN 200 routed through a trunk pod, across nodes, both ways")
	}
}

// addVLANIf adds the 802.1Q interface parent.vid holding p, up, in the
// current netns.
func addVLANIf(parent string, vid int, p netip.Prefix) error {
	pl, err := netlinksafe.LinkByName(parent)
	if err != nil {
		return err
	}
	v := &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: parent + "." + strconv.Itoa(vid), ParentIndex: pl.Attrs().Index}, VlanId: vid}
	if err := netlink.LinkAdd(v); err != nil {
		return err
	}
	if err := netlink.AddrAdd(v, &netlink.Addr{IPNet: ipNet(p)}); err != nil {
		return err
	}
	return netlink.LinkSetUp(v)
}

// route adds dst via gw in the netns at nsPath.
func route(t *testing.T, nsPath string, dst netip.Prefix, gw netip.Addr) {
	t.Helper()
	if err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		return netlink.RouteAdd(&netlink.Route{Dst: ipNet(dst), Gw: gw.AsSlice()})
	}); err != nil {
		t.Fatalf("route %s via %s: %v", dst, gw, err)
	}
}

// unroute deletes the route route added.
func unroute(t *testing.T, nsPath string, dst netip.Prefix, gw netip.Addr) {
	t.Helper()
	if err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		return netlink.RouteDel(&netlink.Route{Dst: ipNet(dst), Gw: gw.AsSlice()})
	}); err != nil {
		t.Errorf("route %s via %s: %v", dst, gw, err)
	}
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
