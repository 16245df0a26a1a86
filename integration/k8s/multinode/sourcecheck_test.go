package multinode

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// TestForgedSourcesDropped: on flannel's bridge (cni0), where podwire
// checks sources in its bridge table, an ordinary pod on node 2 sends to a
// pod on node 1, in both families, datagrams with forged sources (an
// address of node 1's pod range, one of its own node's range, and one from
// nowhere), then with its own: only the genuine ones arrive. Pod-to-pod
// traffic is neither masqueraded by flannel nor SNATed by podwire's
// egress; a source from outside the pod CIDRs is masqueraded by flannel,
// so each forged datagram is recognised by its payload. The control: the same forged datagrams from a pod on node 2 whose source
// check is lifted (a forwarding pod in the namespace the gates grant)
// arrive, so it is the check that drops them, not the network.
func TestForgedSourcesDropped(t *testing.T) {
	needCluster(t)
	const port = 7400
	kubectl(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+forwardingNS+"}\n", "apply", "-f", "-")
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", forwardingNS, "--wait=true", "--timeout=90s") })
	receiver := runPod(t, "default", "forge-receiver", c.Nodes[0], nil)
	sender := runPod(t, "default", "forge-sender", c.Nodes[1], nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := createPod(ctx, forwardingNS, "forge-lifted", c.Nodes[1], nil, map[string]string{"podwire.io/forwarding": "true"}); err != nil {
		t.Fatal(err)
	}
	lifted, err := waitPod(ctx, forwardingNS, "forge-lifted", c.Nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	sink, _ := listen(t, receiver, port)
	forged := map[bool][]netip.Addr{
		false: {netip.MustParseAddr("10.244.0.250"), netip.MustParseAddr("10.244.1.250"), netip.MustParseAddr("203.0.113.66")},
		true:  {netip.MustParseAddr("fd00:10:244::250"), netip.MustParseAddr("fd00:10:244:1::250"), netip.MustParseAddr("2001:db8:66::66")},
	}
	// Each forged datagram carries its source in its payload, so that it
	// is recognised even when a NAT on the way rewrote its source: flannel
	// masquerades a source outside the cluster's pod CIDRs heading into
	// them (the one from nowhere).
	for _, dst := range []netip.Addr{receiver.ip4, receiver.ip6} {
		own := sender.ip4
		if dst.Is6() {
			own = sender.ip6
		}
		to := netip.AddrPortFrom(dst, port)
		for _, src := range forged[dst.Is6()] {
			if err := packets.SendFrom(sender.netns, src, to, "forged "+src.String(), 5); err != nil {
				t.Fatal(err)
			}
		}
		if err := packets.SendFrom(sender.netns, own, to, "genuine", 5); err != nil {
			t.Fatal(err)
		}
		if !sink.WaitGot(own, "genuine", 10*time.Second) {
			t.Fatalf("the genuine datagrams from %s on %s did not reach %s on %s", own, sender.node.Name, dst, receiver.node.Name)
		}
		time.Sleep(200 * time.Millisecond)
		for _, src := range forged[dst.Is6()] {
			if from := sink.From("forged " + src.String()); len(from) > 0 {
				t.Errorf("a datagram forged from %s on %s reached the pod %s on %s (as from %v)", src, sender.node.Name, dst, receiver.node.Name, from)
			}
		}
		t.Logf("to %s on %s: the genuine source %s passed, forged %v dropped", dst, receiver.node.Name, own, forged[dst.Is6()])

		// The control: the same forgeries from the forwarding pod arrive,
		// those inside the cluster's pod CIDRs with their forged source.
		for _, src := range forged[dst.Is6()] {
			payload := "lifted " + src.String()
			if err := packets.SendFrom(lifted.netns, src, to, payload, 5); err != nil {
				t.Fatal(err)
			}
			var from []netip.Addr
			for deadline := time.Now().Add(10 * time.Second); len(from) == 0 && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
				from = sink.From(payload)
			}
			switch {
			case len(from) == 0:
				t.Errorf("control: the datagram forged from %s by the forwarding pod on %s did not reach %s: the drops above prove nothing", src, lifted.node.Name, dst)
			case (cluster.ClusterCIDR.Contains(src) || cluster.ClusterCIDR6.Contains(src)) && !slices.Contains(from, src):
				t.Errorf("control: the datagram forged from %s by the forwarding pod reached %s as from %v", src, dst, from)
			default:
				t.Logf("control: forged %s from the forwarding pod reached %s as from %v", src, dst, from)
			}
		}
	}
}
