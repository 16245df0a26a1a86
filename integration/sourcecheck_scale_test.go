package integration

import (
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/state"
)

// TestRebuildWithManyPods: the first ADD on a node whose state holds 3000
// attachments (a flushed ruleset, a changed config) lays the source-check
// table down with every pod's elements in one atomic batch, and the pods'
// elements are all there. One batch of that size overflows both a netlink
// attribute (64 KiB) and the default socket send buffer unless podwire
// splits the element lists and raises the buffer.
func TestRebuildWithManyPods(t *testing.T) {
	const pods = 3000
	n := newNode(t)
	_, recs := fakePods(pods)
	store := state.New(n.StateDir())
	for _, r := range recs {
		r.Network = "podwire-test"
		r.PodName = "a-realistic-deployment-name-7d9f8b6c4-" + r.HostIfName
		if err := store.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	p := n.mustAddPod(podSpec{})
	if got := len(n.setElements("checked")); got != pods+1 {
		t.Fatalf("checked interfaces after the rebuild: %d, want %d", got, pods+1)
	}
	if got := len(n.setElements("pod-v6")); got != pods+1 {
		t.Fatalf("pod-v6 elements after the rebuild: %d, want %d", got, pods+1)
	}
	// A flushed ruleset is repaired by the next ADD, elements included.
	if err := n.NS.Do(func(ns.NetNS) error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		c.FlushRuleset()
		return c.Flush()
	}); err != nil {
		t.Fatal(err)
	}
	n.mustAddPod(podSpec{})
	if got := len(n.setElements("pod-v4")); got != pods+2 {
		t.Fatalf("pod-v4 elements after the repair: %d, want %d", got, pods+2)
	}
	if err := p.Check(); err != nil {
		t.Fatalf("CHECK after the repair: %v", err)
	}
}
