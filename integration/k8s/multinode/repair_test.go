package multinode

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/packets"
)

// TestTablesRepairedBesideKubeProxy: on node 2, whose ruleset also holds
// kube-proxy's and flannel's tables, the table that checks flannel's bridge
// (`bridge podwire`) is deleted behind podwire's back; with no ADD, node
// 2's agent puts it back within 10 s (a forged datagram of a pod wired
// before is dropped again while its own arrive), kube-proxy's table is
// untouched, the repair is an Event on the Node, and node 2's agent logs
// that it rebuilt bridge podwire.
func TestTablesRepairedBesideKubeProxy(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	receiver := runPod(t, "default", "repair-receiver", n1, nil)
	victim := runPod(t, "default", "repair-victim", n2, nil)
	sink, to := listen(t, receiver, 7405)
	forged := netip.MustParseAddr("203.0.113.88")
	checkedPod(t, sink, to, victim, forged, "before the drift")
	// attempt sends one forged and one genuine datagram tagged i; it is
	// true when the genuine one arrived and the forged one did not.
	attempt := func(i int) bool {
		tag := fmt.Sprintf("-%d", i)
		_ = packets.SendFrom(victim.netns, forged, to, "forged"+tag, 1)
		_ = packets.SendFrom(victim.netns, victim.ip4, to, "genuine"+tag, 1)
		return sink.WaitGot(victim.ip4, "genuine"+tag, time.Second) && !sink.Got(forged, "forged"+tag)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The deletion succeeding is the proof that the table was there and is
	// gone: the agent repairs within tens of milliseconds of nftables'
	// notification, before a listing run after it would tell.
	out, err := n2.Command(ctx, "nft", "delete", "table", "bridge", "podwire").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: nft delete table bridge podwire: %v\n%s", n2.Name, err, out)
	}
	start := time.Now()
	// The bridge is unchecked until the repair, which may come first: this
	// probe is only reported.
	t.Logf("right after the deletion: checked %v", attempt(0))
	for i := 1; !attempt(i); i++ {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s: the source check was not back 10 s after the drift (no ADD ran)", n2.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s's agent put bridge podwire back %v after its deletion, with no ADD", n2.Name, time.Since(start).Round(100*time.Millisecond))
	if out, err := n2.Command(ctx, "nft", "list", "tables").CombinedOutput(); err != nil || !strings.Contains(string(out), "table ip kube-proxy") {
		t.Errorf("%s: kube-proxy's table after the repair: %v\n%s", n2.Name, err, out)
	}
	logs, err := c.Kubectl(ctx, "", "-n", agentNS, "logs", agentPods(t, n2.Name, "{.items[0].metadata.name}"),
		"--since-time="+start.Add(-time.Second).UTC().Format(time.RFC3339))
	if err != nil || !strings.Contains(logs, "rebuilt [bridge podwire]") {
		t.Errorf("%s's agent log since the deletion has no repair of bridge podwire: %v\n%s", n2.Name, err, logs)
	}
	events := kubectl(t, "", "get", "events", "-A", "--field-selector",
		"involvedObject.kind=Node,involvedObject.name="+n2.Name+",reason=PodwireTablesRepaired", "-o", "name")
	if strings.TrimSpace(events) == "" {
		t.Errorf("no PodwireTablesRepaired Event on Node %s", n2.Name)
	}
}
