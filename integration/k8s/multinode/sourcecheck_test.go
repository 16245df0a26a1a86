package multinode

import (
	"net/netip"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/packets"
)

// TestForgedSourcesDropped: on flannel's bridge (cni0), where podwire
// checks sources in its bridge table, an ordinary pod on node 2 sends to a
// pod on node 1, in both families, datagrams with forged sources (an
// address of node 1's pod range, one of its own node's range, and one from
// nowhere), then with its own. Pod-to-pod traffic is neither masqueraded
// by flannel nor SNATed by podwire's egress, so a forged source that
// passed would reach the receiver as sent: only the genuine ones do. (With
// sourceCheck off, every forged datagram arrives: checked by hand once.)
func TestForgedSourcesDropped(t *testing.T) {
	needCluster(t)
	const port = 7400
	receiver := runPod(t, "default", "forge-receiver", c.Nodes[0], nil)
	sender := runPod(t, "default", "forge-sender", c.Nodes[1], nil)
	sink, _ := listen(t, receiver, port)
	forged := map[bool][]netip.Addr{
		false: {netip.MustParseAddr("10.244.0.250"), netip.MustParseAddr("10.244.1.250"), netip.MustParseAddr("203.0.113.66")},
		true:  {netip.MustParseAddr("fd00:10:244::250"), netip.MustParseAddr("fd00:10:244:1::250"), netip.MustParseAddr("2001:db8:66::66")},
	}
	for _, dst := range []netip.Addr{receiver.ip4, receiver.ip6} {
		own := sender.ip4
		if dst.Is6() {
			own = sender.ip6
		}
		to := netip.AddrPortFrom(dst, port)
		for _, src := range forged[dst.Is6()] {
			if err := packets.SendFrom(sender.netns, src, to, "forged", 5); err != nil {
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
		passed := false
		for _, src := range forged[dst.Is6()] {
			if sink.Got(src, "forged") {
				passed = true
				t.Errorf("a datagram forged from %s on %s reached the pod %s on %s", src, sender.node.Name, dst, receiver.node.Name)
			}
		}
		if passed {
			continue
		}
		t.Logf("to %s on %s: the genuine source %s passed, forged %v dropped", dst, receiver.node.Name, own, forged[dst.Is6()])
	}
}
