package vlan

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/integration/packets"
)

// TestVLANPortSpoofing: from a VLAN 100 access port, what the pod sends
// from its own address and MAC reaches the client on the far side of the
// switch (the control), and the bridge port check of its node drops the
// rest: a forged source, the VLAN's gateway address (excluded from the
// grant) as source and in an ARP claim, and its own address sent with
// another pod's MAC (a pod on the other node).
func TestVLANPortSpoofing(t *testing.T) {
	suite.Need(t)
	ensureNamespace(t, vlanNS)
	own, other := netip.MustParseAddr("192.0.2.31"), netip.MustParseAddr("192.0.2.32")
	createPod(t, vlanNS, "port-a", c.Nodes[0], vlanPod(100, own))
	createPod(t, vlanNS, "port-b", c.Nodes[1], vlanPod(100, other))
	pa := readyPod(t, vlanNS, "port-a", c.Nodes[0])
	pb := readyPod(t, vlanNS, "port-b", c.Nodes[1])
	packets.EchoServer(t, clientNS.Path(), netip.AddrPortFrom(clientIP, echoPort))
	reaches(t, "the pod to the client (neighbours resolved)", pa.netns, clientIP)

	const sinkPort = echoPort + 1
	sink, err := packets.NewSink(clientNS.Path(), sinkPort)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	to := netip.AddrPortFrom(clientIP, sinkPort)
	send := func(src netip.Addr, payload string) {
		t.Helper()
		if err := packets.SendFrom(pa.netns, src, to, payload, 5); err != nil {
			t.Fatal(err)
		}
	}
	send(own, "own")
	if !sink.WaitGot(own, "own", 5*time.Second) {
		t.Fatalf("the client did not get what the pod sent from its own %s: the drops below would prove nothing", own)
	}
	forged := netip.MustParseAddr("192.0.2.66")
	send(forged, "forged")
	send(gatewayIP, "gateway")

	arps, err := packets.OpenCapture(clientNS.Path(), "eth0")
	if err != nil {
		t.Fatal(err)
	}
	defer arps.Close()
	if err := packets.SendGratuitousARP(pa.netns, podIf, own); err != nil {
		t.Fatal(err)
	}
	if !arps.WaitFor(5*time.Second, packets.IsARPFrom(own)) {
		t.Fatalf("the client saw no ARP of the pod's own %s: the capture cannot prove the drop below", own)
	}
	if err := packets.SendGratuitousARP(pa.netns, podIf, gatewayIP); err != nil {
		t.Fatal(err)
	}
	if arps.WaitFor(2*time.Second, packets.IsARPFrom(gatewayIP)) {
		t.Errorf("the client saw the pod's ARP claiming the gateway %s", gatewayIP)
	}
	if sink.Got(forged, "forged") {
		t.Errorf("the client got a forged source %s", forged)
	}
	if sink.Got(gatewayIP, "gateway") {
		t.Errorf("the client got the gateway's address %s as source", gatewayIP)
	}

	// Its own address with the other pod's MAC.
	setMAC(t, pa.netns, linkMAC(t, pb.netns, podIf))
	send(own, "stolen-mac")
	if sink.WaitGot(own, "stolen-mac", 2*time.Second) {
		t.Errorf("the client got the pod's datagram sent with %s's MAC", pb.name)
	}
	if !t.Failed() {
		t.Log("PASS VLAN port check: own source passes; forged source, gateway address, gateway ARP claim and another pod's MAC dropped")
	}
}

// podIf is the pod-side name of the VLAN interface (config.podIfName's
// default).
const podIf = "net1"

// linkMAC is the MAC of ifName in the netns at nsPath.
func linkMAC(t *testing.T, nsPath, ifName string) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	if err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(ifName)
		if err == nil {
			mac = l.Attrs().HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}

// setMAC gives podIf in the netns at nsPath the address mac, as a pod
// forging its source MAC does.
func setMAC(t *testing.T, nsPath string, mac net.HardwareAddr) {
	t.Helper()
	if err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(podIf)
		if err != nil {
			return err
		}
		return netlink.LinkSetHardwareAddr(l, mac)
	}); err != nil {
		t.Fatalf("MAC %s on %s: %v", mac, podIf, err)
	}
}
