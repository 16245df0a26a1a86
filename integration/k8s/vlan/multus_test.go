package vlan

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// secondaryPrefix is the NetworkAttachmentDefinition's subnet: a macvlan
// on each node's cluster uplink (eth0), so that pods on the two nodes meet
// on the nodes' segment, apart from the trunk.
var secondaryPrefix = netip.MustParsePrefix("10.98.8.0/24")

// TestMultusVLAN: under a real Multus thick (its own manifest; its image,
// of scripts/multus-build.sh's build, imported on both nodes from
// PODWIRE_MULTUS_ARCHIVE, which vmimages wrote on the host), a pod asks for an access port on VLAN 100 and selects a macvlan
// NetworkAttachmentDefinition:
//   - with podwire's default VLAN interface name, net1, which Multus gives
//     the pod's first attachment, the pod is refused: the PodwireRefused
//     Event names both, and the kubelet's sandbox error is that refusal;
//   - with podwire.io/vlan-ifname vlan0 it runs with both interfaces: on
//     VLAN 100 it reaches the client across the switch, and over net1 a
//     pod with the same attachment on the other node.
func TestMultusVLAN(t *testing.T) {
	suite.Need(t)
	archive := os.Getenv("PODWIRE_MULTUS_ARCHIVE")
	if archive == "" {
		t.Fatal("needs PODWIRE_MULTUS_ARCHIVE, Multus's image of vmimages: run it with make test-vm-k8s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start := time.Now()
	if err := c.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	t.Logf("Multus's image imported on both nodes in %.1fs", time.Since(start).Seconds())
	ref := cluster.MultusImageRef
	// No kube-proxy runs here: the daemon reaches the apiserver directly.
	multus := cluster.Multus{Image: ref, APIServer: netip.AddrPortFrom(c.APIServerAddr(), 6443)}
	start = time.Now()
	if err := c.InstallMultus(ctx, multus); err != nil {
		t.Fatal(err)
	}
	t.Logf("Multus %s running on both nodes in %.1fs", ref, time.Since(start).Seconds())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := c.UninstallMultus(ctx, multus); err != nil {
			t.Error(err)
		}
	})
	const nad = "macvlan-nodes"
	config := fmt.Sprintf(`{"cniVersion":"0.3.1","name":%q,"type":"macvlan","master":"eth0","mode":"bridge",`+
		`"capabilities":{"ips":true},"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]]}}`, nad, secondaryPrefix)
	ensureNamespace(t, vlanNS)
	if _, err := c.Kubectl(ctx, fmt.Sprintf("apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n"+
		"metadata: {name: %s, namespace: %s}\nspec:\n  config: '%s'\n", nad, vlanNS, config), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	secondary := func(host byte) (netip.Addr, string) {
		b := secondaryPrefix.Addr().As4()
		b[3] = host
		a := netip.AddrFrom4(b)
		return a, fmt.Sprintf(`[{"name":%q,"ips":["%s/%d"]}]`, nad, a, secondaryPrefix.Bits())
	}

	// net1 twice: podwire's default name and Multus's first attachment.
	// The refused pod asks for an address of its own, so that nothing of
	// it, while the kubelet still tries its sandbox, meets the next pod.
	_, selection := secondary(30)
	clash := vlanPod(100, netip.MustParseAddr("192.0.2.36"))
	clash["k8s.v1.cni.cncf.io/networks"] = selection
	createPod(t, vlanNS, "multus-clash", c.Nodes[0], clash)
	refused, sandbox := refusedEvents(t, vlanNS, "multus-clash")
	for _, want := range []string{`podIfName "net1"`, "the interface Multus gives the pod's network \"" + nad + "\"",
		"k8s.v1.cni.cncf.io/networks", "podwire.io/vlan-ifname"} {
		if !strings.Contains(refused, want) {
			t.Errorf("the PodwireRefused Event does not say %q: %s", want, refused)
		}
	}
	for _, e := range sandbox {
		if !strings.Contains(e, "clashes with the interface Multus gives") {
			t.Errorf("the kubelet's sandbox error is not the refusal: %s", e)
		}
	}
	if err := deletePod(ctx, vlanNS, "multus-clash"); err != nil {
		t.Fatal(err)
	}

	// Named apart, the pod has both: vlan0 on VLAN 100, net1 on the
	// macvlan.
	vlanAddr := netip.MustParseAddr("192.0.2.37")
	a, selA := secondary(31)
	b, selB := secondary(32)
	both := vlanPod(100, vlanAddr)
	both["podwire.io/vlan-ifname"] = "vlan0"
	both["k8s.v1.cni.cncf.io/networks"] = selA
	createPod(t, vlanNS, "multus-vlan", c.Nodes[0], both)
	createPod(t, vlanNS, "multus-peer", c.Nodes[1], map[string]string{"k8s.v1.cni.cncf.io/networks": selB})
	pv := readyPod(t, vlanNS, "multus-vlan", c.Nodes[0])
	peer := readyPod(t, vlanNS, "multus-peer", c.Nodes[1])
	packets.EchoServer(t, clientNS.Path(), netip.AddrPortFrom(clientIP, echoPort))
	packets.EchoServer(t, peer.netns, netip.AddrPortFrom(b, echoPort))
	reaches(t, "the VLAN 100 pod with an attachment to the client over vlan0", pv.netns, clientIP)
	reaches(t, "the VLAN 100 pod over net1 to the attachment's pod on node 2", pv.netns, b)
	if !t.Failed() {
		t.Logf("PASS Multus beside a VLAN: net1 twice refused naming both; vlan0 reaches the client on VLAN 100 and net1 (%s) reaches %s on %s",
			a, b, c.Nodes[1].Name)
	}
}
