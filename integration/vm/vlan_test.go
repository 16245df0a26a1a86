package vm

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// vlanConf is the podwire config of the VLAN tests: bridge podwire0 with
// uplink0 as trunk, VLANs 100-299 allowed.
func vlanConf(extra map[string]any) map[string]any {
	c := map[string]any{"bridge": "podwire0", "uplink": "uplink0", "allowedVLANs": "100-299"}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// addUplink makes the node's uplink: a veth name in the node netns whose
// far end, eth0 in a new netns, stands for the switch port (a trunk).
func addUplink(t testing.TB, n *node, name string) ns.NetNS {
	t.Helper()
	far := newNS(t)
	addVeth(t, n.NS, name, far, "eth0")
	return far
}

// addFarVLAN100 gives n the uplink uplink0 to a far end whose interface
// eth0.100 (returned) holds 192.0.2.100/24 and 2001:db8:100::100/64.
func addFarVLAN100(t *testing.T, n *node) (far ns.NetNS, farIf string) {
	t.Helper()
	far = addUplink(t, n, "uplink0")
	farIf = addVLANIf(t, far, "eth0", 100, "192.0.2.100/24")
	addAddr(t, far, farIf, "2001:db8:100::100/64")
	return far, farIf
}

// addVLANIf adds an 802.1Q interface parent.vid with cidr in netns.
func addVLANIf(t *testing.T, netns ns.NetNS, parent string, vid int, cidr string) string {
	t.Helper()
	name := fmt.Sprintf("%s.%d", parent, vid)
	err := netns.Do(func(ns.NetNS) error {
		p, err := netlinksafe.LinkByName(parent)
		if err != nil {
			return fmt.Errorf("failed to find %q: %w", parent, err)
		}
		v := &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: p.Attrs().Index}, VlanId: vid}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("failed to add %q: %w", name, err)
		}
		return linkUp(name)
	})
	if err != nil {
		t.Fatal(err)
	}
	addAddr(t, netns, name, cidr)
	return name
}

// uplinkVLANs is the tagged VLAN membership of the node's uplink0.
func uplinkVLANs(t *testing.T, n *node) []uint16 {
	t.Helper()
	var v vlanbridge.PortVLANs
	n.Do(func() error {
		l, err := netlinksafe.LinkByName("uplink0")
		if err != nil {
			return err
		}
		v, err = vlanbridge.ListPortVLANs(l.Attrs().Index)
		if err == nil && v.PVID != 0 {
			err = fmt.Errorf("uplink0 has untagged VLAN %d", v.PVID)
		}
		return err
	})
	return v.Tagged
}

// TestVLANPodsThroughPlugin wires pods through ptp + podwire and proves the
// VLAN model with packets: same-VLAN pods reach each other, a VLAN 200 pod
// (in the same subnet) reaches neither, a trunk pod with 802.1Q
// subinterfaces reaches both VLANs, and frames leave the uplink tagged: a
// far end with only a VLAN 100 interface reaches the VLAN 100 pods.
func TestVLANPodsThroughPlugin(t *testing.T) {
	require(t, capVLANFiltering, capVLAN8021Q)
	n := newNode(t, vlanConf(nil))
	far, farIf := addFarVLAN100(t, n)
	announcements := capturePackets(t, far, farIf)
	nodeFrames := capturePackets(t, n.NS, "")

	a := n.mustAddPod(map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.1/24,2001:db8:100::1/64"})
	// The far end sees a's announcements on VLAN 100, before any traffic.
	mustSee(t, announcements, "a's gratuitous ARP on the far end's VLAN 100", isGratuitousARP(net.ParseIP("192.0.2.1")))
	mustSee(t, announcements, "a's unsolicited NA on the far end's VLAN 100", isNeighborAdvert(net.ParseIP("2001:db8:100::1")))
	// The node sees no announcement of a's primary (ptp) address: the host
	// veth is new and holds no entry that one could correct.
	for _, ip := range a.Result.IPs {
		if ip.Interface != nil && a.Result.Interfaces[*ip.Interface].Name == "eth0" && ip.Address.IP.To4() != nil &&
			nodeFrames.WaitFor(500*time.Millisecond, isGratuitousARP(ip.Address.IP)) {
			t.Errorf("the node saw a gratuitous ARP for a's point-to-point primary address %s", ip.Address.IP)
		}
	}

	b := n.mustAddPod(map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.2/24"})
	c := n.mustAddPod(map[string]string{"podwire.io/vlan": "200", "podwire.io/vlan-ips": "192.0.2.3/24,198.51.100.3/24"})
	tr := n.mustAddPod(map[string]string{"podwire.io/vlan-trunk": "100,200", "podwire.io/vlan-ifname": "trunk0"})
	addVLANIf(t, tr.NS, "trunk0", 100, "192.0.2.4/24")
	addVLANIf(t, tr.NS, "trunk0", 200, "198.51.100.4/24")
	// A trunk with a native VLAN: 200 untagged on net1 with a static
	// address (so the port is checked, MAC only), 100 tagged.
	nat := n.mustAddPod(map[string]string{"podwire.io/vlan": "200", "podwire.io/vlan-trunk": "100",
		"podwire.io/vlan-ips": "198.51.100.5/24"})
	addVLANIf(t, nat.NS, "net1", 100, "192.0.2.5/24")

	// The result names the pod interface with its sandbox and the static IP.
	var podIf int = -1
	for i, itf := range a.Result.Interfaces {
		if itf.Name == "net1" && itf.Sandbox == a.NS.Path() {
			podIf = i
		}
	}
	if podIf < 0 {
		t.Fatalf("result has no net1 interface in the pod's sandbox: %+v", a.Result.Interfaces)
	}
	found := false
	for _, ip := range a.Result.IPs {
		if ip.Interface != nil && *ip.Interface == podIf && ip.Address.IP.Equal(net.ParseIP("192.0.2.1")) {
			found = true
		}
	}
	if !found {
		t.Fatalf("result lacks 192.0.2.1 on interface %d: %v", podIf, a.Result.IPs)
	}

	mustPing(t, a.NS, "a to b on VLAN 100", "192.0.2.2")
	mustPing(t, b.NS, "b to a on VLAN 100", "192.0.2.1")
	mustNotPing(t, c.NS, "c on VLAN 200 to a on VLAN 100", "192.0.2.1")
	mustNotPing(t, c.NS, "c on VLAN 200 to b on VLAN 100", "192.0.2.2")
	mustPing(t, tr.NS, "trunk pod on VLAN 100 to a", "192.0.2.1")
	mustPing(t, tr.NS, "trunk pod on VLAN 200 to c", "198.51.100.3")
	mustPing(t, nat.NS, "native VLAN 200 of a trunk to c", "198.51.100.3")
	mustPing(t, nat.NS, "tagged VLAN 100 of a trunk with a native VLAN to a", "192.0.2.1")
	mustPing(t, far, "far end of the uplink on VLAN 100 to a", "192.0.2.1")
	mustPing(t, far, "far end of the uplink on VLAN 100 to b", "192.0.2.2")
	mustPing(t, far, "far end of the uplink on VLAN 100 to a over IPv6", "2001:db8:100::1")
	mustNotPing(t, far, "far end of the uplink on VLAN 100 to c on VLAN 200", "192.0.2.3")

	if err := tr.Check(); err != nil {
		t.Errorf("CHECK of the trunk pod through the chain: %v", err)
	}
	for name, p := range map[string]*cnitest.Pod{"a": a, "b": b, "c": c, "trunk": tr, "native": nat} {
		if err := p.CheckLast(); err != nil {
			t.Errorf("CHECK of pod %s: %v", name, err)
		}
	}
	// CHECK after tampering: the port loses its VLAN.
	hostVeth := vlanbridge.HostVethName(a.RT.ContainerID, a.RT.IfName)
	n.Do(func() error {
		l, err := netlinksafe.LinkByName(hostVeth)
		if err != nil {
			return err
		}
		return netlink.BridgeVlanDel(l, 100, true, true, false, true)
	})
	if err := a.CheckLast(); err == nil || !strings.Contains(err.Error(), hostVeth) {
		t.Errorf("CHECK after VLAN 100 was removed from %s: got %v, want an error naming the port", hostVeth, err)
	}
	mustNotPing(t, a.NS, "a after its port lost VLAN 100", "192.0.2.2")
	if got := uplinkVLANs(t, n); !slices.Equal(got, []uint16{100, 200}) {
		t.Errorf("uplink0 carries %v, want [100 200]", got)
	}
	for _, p := range []*cnitest.Pod{a, b, c, tr, nat} {
		if err := p.Del(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		if err := p.Del(); err != nil {
			t.Fatalf("second DEL: %v", err)
		}
	}
	if got := uplinkVLANs(t, n); len(got) != 0 {
		t.Errorf("uplink0 still carries %v after every pod left", got)
	}
	if left := n.leftovers(); len(left) > 0 {
		t.Errorf("left behind after DEL: %v", left)
	}
}

// TestVLANRefusals: what the admin gates and the node forbid fails ADD with
// CNI error 7, a message naming the culprit, and nothing left behind.
func TestVLANRefusals(t *testing.T) {
	require(t, capVLANFiltering)
	for _, tc := range []struct {
		name  string
		conf  map[string]any
		setup func(t *testing.T, n *node)
		ann   map[string]string
		want  string
	}{
		{name: "VLAN outside allowedVLANs", ann: map[string]string{"podwire.io/vlan": "300"}, want: "allowedVLANs"},
		{name: "trunk VLAN outside allowedVLANs", ann: map[string]string{"podwire.io/vlan-trunk": "100,4000"}, want: "allowedVLANs"},
		{name: "reversed trunk range", ann: map[string]string{"podwire.io/vlan-trunk": "200-100"}, want: "reversed"},
		{name: "name clash with the primary interface", ann: map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ifname": "eth0"}, want: `"eth0"`},
		{name: "name clash in the pod", ann: map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ifname": "lo"}, want: `"lo"`},
		{
			name: "uplink with a global address",
			conf: map[string]any{"uplink": "uplink1"},
			setup: func(t *testing.T, n *node) {
				addUplink(t, n, "uplink1")
				addAddr(t, n.NS, "uplink1", "203.0.113.1/24")
			},
			ann:  map[string]string{"podwire.io/vlan": "100"},
			want: "global address",
		},
		{
			name: "foreign bridge without VLAN filtering",
			conf: map[string]any{"bridge": "brforeign"},
			setup: func(t *testing.T, n *node) {
				n.Do(func() error {
					return netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "brforeign"}})
				})
			},
			ann:  map[string]string{"podwire.io/vlan": "100"},
			want: "brforeign",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, vlanConf(tc.conf))
			addUplink(t, n, "uplink0")
			if tc.setup != nil {
				tc.setup(t, n)
			}
			_, err := n.addPod(tc.ann)
			if err == nil {
				t.Fatalf("%s: ADD succeeded, want a refusal", tc.name)
			}
			if cniCode(err) != 7 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v (code %d), want code 7 naming %s", tc.name, err, cniCode(err), tc.want)
			}
			if left := n.leftovers(); len(left) > 0 {
				t.Errorf("%s: left behind: %v", tc.name, left)
			}
			n.Do(func() error {
				for _, name := range []string{"uplink0", "uplink1"} {
					if l, err := netlinksafe.LinkByName(name); err == nil && l.Attrs().MasterIndex != 0 {
						return fmt.Errorf("%s: %s was enslaved by a refused ADD", tc.name, name)
					}
				}
				if l, err := netlinksafe.LinkByName("brforeign"); err == nil {
					if br := l.(*netlink.Bridge); br.VlanFiltering != nil && *br.VlanFiltering {
						return fmt.Errorf("%s: VLAN filtering of the foreign bridge was turned on", tc.name)
					}
				}
				return nil
			})
		})
	}
}

// TestUplinkVLANsExactUnderConcurrency adds and deletes pods sharing VLANs
// concurrently (ADDs, then DELs racing ADDs): the uplink carries exactly the
// VLANs of the pods left, as tagged members.
func TestUplinkVLANsExactUnderConcurrency(t *testing.T) {
	require(t, capVLANFiltering)
	n := newNode(t, vlanConf(nil))
	addUplink(t, n, "uplink0")

	const count = 8
	pods := make([]*cnitest.Pod, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pods[i], errs[i] = n.addPod(map[string]string{"podwire.io/vlan": fmt.Sprint(100 + i%3)})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent ADD of pod %d: %v\nlog:\n%s", i, err, n.Log())
		}
	}
	if got := uplinkVLANs(t, n); !slices.Equal(got, []uint16{100, 101, 102}) {
		t.Fatalf("after ADD uplink0 carries %v, want [100 101 102]", got)
	}

	// While pods 2 and 5 (VLAN 102's only users), 0, 3 (of 100) and 1 (of
	// 101) leave, three pods arrive on 103, 100 and 103.
	newVLANs := []int{103, 100, 103}
	added := make([]*cnitest.Pod, len(newVLANs))
	addErrs := make([]error, len(newVLANs))
	for k, vid := range newVLANs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			added[k], addErrs[k] = n.addPod(map[string]string{"podwire.io/vlan": fmt.Sprint(vid)})
		}()
	}
	for _, i := range []int{2, 5, 0, 3, 1} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pods[i].Del()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent DEL of pod %d: %v", i, err)
		}
	}
	for k, err := range addErrs {
		if err != nil {
			t.Fatalf("ADD of pod on VLAN %d during DELs: %v", newVLANs[k], err)
		}
	}
	if got := uplinkVLANs(t, n); !slices.Equal(got, []uint16{100, 101, 103}) {
		t.Fatalf("after concurrent DEL and ADD uplink0 carries %v, want [100 101 103]", got)
	}
	for _, p := range append([]*cnitest.Pod{pods[4], pods[6], pods[7]}, added...) {
		if err := p.Del(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	if got := uplinkVLANs(t, n); len(got) != 0 {
		t.Fatalf("after the last DEL uplink0 carries %v, want none", got)
	}
}
