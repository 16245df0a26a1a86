package vlan

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// TestVLANDriftRepaired: on node 1, VLAN 100 is taken off the pod's bridge
// port, then the uplink is taken off the bridge, as a hand or another tool
// would. Each time the agent puts the wiring back, the pod reaches the
// client across the switch again, and a PodwireVLANRepaired Event on the
// Node names the pod.
func TestVLANDriftRepaired(t *testing.T) {
	suite.Need(t)
	ensureNamespace(t, vlanNS)
	n := c.Nodes[0]
	p := runPod(t, vlanNS, "drift", n, vlanPod(100, netip.MustParseAddr("192.0.2.41")))
	packets.EchoServer(t, clientNS.Path(), netip.AddrPortFrom(clientIP, echoPort))
	reaches(t, "the pod to the client before the drift", p.netns, clientIP)
	port := hostPort(t, p)
	since := time.Now()

	inNode(t, n, "take VLAN 100 off "+port, func() error {
		l, err := netlinksafe.LinkByName(port)
		if err != nil {
			return err
		}
		return netlink.BridgeVlanDel(l, 100, true, true, false, true)
	})
	waitNode(t, n, "VLAN 100 back on "+port, func() error {
		l, err := netlinksafe.LinkByName(port)
		if err != nil {
			return err
		}
		vlans, err := netlinksafe.BridgeVlanList()
		if err != nil {
			return err
		}
		for _, v := range vlans[int32(l.Attrs().Index)] {
			if v.Vid == 100 && v.PortVID() && v.EngressUntag() {
				return nil
			}
		}
		return fmt.Errorf("%s carries %v", port, vlans[int32(l.Attrs().Index)])
	})
	reaches(t, "the pod to the client after the port's repair", p.netns, clientIP)

	uplink := uplinks[0]
	var bridge int
	inNode(t, n, "take "+uplink+" off its bridge", func() error {
		l, err := netlinksafe.LinkByName(uplink)
		if err != nil {
			return err
		}
		bridge = l.Attrs().MasterIndex
		return netlink.LinkSetNoMaster(l)
	})
	waitNode(t, n, uplink+" back on its bridge", func() error {
		l, err := netlinksafe.LinkByName(uplink)
		if err != nil {
			return err
		}
		if l.Attrs().MasterIndex != bridge {
			return fmt.Errorf("%s has master %d, want %d", uplink, l.Attrs().MasterIndex, bridge)
		}
		return nil
	})
	reaches(t, "the pod to the client after the uplink's repair", p.netns, clientIP)

	events := nodeEvents(t, n.Name, "PodwireVLANRepaired", since)
	if !slices.ContainsFunc(events, func(m string) bool { return strings.Contains(m, "drift") }) {
		t.Errorf("no PodwireVLANRepaired Event on %s naming the pod: %q", n.Name, events)
	}
	if !t.Failed() {
		t.Logf("PASS VLAN drift: a port's VLAN and the uplink's bridge repaired by the agent on %s, with %d Events", n.Name, len(events))
	}
}

// hostPort is the name of the pod's VLAN veth on its node: the peer of
// its podIf.
func hostPort(t *testing.T, p *pod) string {
	t.Helper()
	var peer int
	if err := ns.WithNetNSPath(p.netns, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(podIf)
		if err == nil {
			peer = l.Attrs().ParentIndex
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var name string
	inNode(t, p.node, "find the host veth", func() error {
		l, err := netlink.LinkByIndex(peer)
		if err == nil {
			name = l.Attrs().Name
		}
		return err
	})
	return name
}

// inNode runs f in node n's netns, failing t with what on an error.
func inNode(t *testing.T, n *cluster.Node, what string, f func() error) {
	t.Helper()
	if err := ns.WithNetNSPath(n.NetNS, func(ns.NetNS) error { return f() }); err != nil {
		t.Fatalf("%s on %s: %v", what, n.Name, err)
	}
}

// waitNode waits up to 5 s for cond to hold in node n's netns: the
// agent repairs 100 ms after the kernel's notification; TCG slows that
// down, but a repair that waits for a backstop or an unrelated trigger
// takes longer than the bound.
func waitNode(t *testing.T, n *cluster.Node, what string, cond func() error) {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < 5*time.Second {
		if err = ns.WithNetNSPath(n.NetNS, func(ns.NetNS) error { return cond() }); err == nil {
			t.Logf("%s on %s after %.2fs", what, n.Name, time.Since(start).Seconds())
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s on %s: not within 5 s: %v", what, n.Name, err)
}

// nodeEvents waits up to 30 s for Events of reason on the Node name, last
// seen after since, and returns their messages.
func nodeEvents(t *testing.T, name, reason string, since time.Time) []string {
	t.Helper()
	var list struct {
		Items []struct {
			Message       string
			LastTimestamp time.Time `json:"lastTimestamp"`
			EventTime     time.Time `json:"eventTime"`
		} `json:"items"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b, err := api(ctx, "GET", "/api/v1/events?fieldSelector=involvedObject.kind%3DNode,involvedObject.name%3D"+name+",reason%3D"+reason, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range list.Items {
			if e.LastTimestamp.After(since.Add(-time.Second)) || e.EventTime.After(since.Add(-time.Second)) {
				out = append(out, e.Message)
			}
		}
		if len(out) > 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(time.Second)
	}
}
