package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/podwire/podwire/pkg/agent"
	"github.com/podwire/podwire/pkg/nodestatus"
)

// TestAgentNodeStatus: the agent's PodwireNodeStatus follows the node. A
// running agent reports itself Ready with podwire in the chain and its
// tables verified; a pod's ADD shows in the report with its source check;
// after `nft flush ruleset` in the node's netns the report shows the
// repair (its count up, its time after the flush). The API is a fake; the
// node, the plugin, nftables and the agent are real.
func TestAgentNodeStatus(t *testing.T) {
	n := newNode(t)
	fc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{agent.NodeStatusResource: nodestatus.Kind + "List"})
	n.startAgentWith(func(c *agent.Config) { c.NodeStatus = fc.Resource(agent.NodeStatusResource) },
		n.primaryList("1.0.0", nil), n.podwireEntry(nil), knode("worker-1", nil))
	report := func() (*nodestatus.Status, error) {
		u, err := fc.Resource(agent.NodeStatusResource).Get(context.Background(), "worker-1", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(u.Object["status"])
		if err != nil {
			return nil, err
		}
		st := &nodestatus.Status{}
		return st, json.Unmarshal(b, st)
	}
	await := func(what string, ok func(*nodestatus.Status) error) *nodestatus.Status {
		t.Helper()
		var st *nodestatus.Status
		if err := eventually(15*time.Second, func() error {
			var err error
			if st, err = report(); err != nil {
				return err
			}
			return ok(st)
		}); err != nil {
			t.Fatalf("report %s: %v (%+v)", what, err, st)
		}
		return st
	}
	st := await("of a Ready agent", func(st *nodestatus.Status) error {
		if p := st.Problems(); len(p) > 0 {
			return fmt.Errorf("problems %q", p)
		}
		return nil
	})
	t.Logf("agent %s reported Ready, podwire in %s", st.Agent.Version, st.Chain.Conflist)

	p := n.mustAddPod(podSpec{version: "1.0.0", name: "reported"})
	await("of the pod", func(st *nodestatus.Status) error {
		if st.Counts.Wired != 1 || len(st.Pods) != 1 || st.Pods[0].Name != "reported" || !st.Pods[0].SourceCheck {
			return fmt.Errorf("counts %+v, pods %+v", st.Counts, st.Pods)
		}
		return nil
	})

	before, flushed := st.Tables.Repairs, time.Now()
	c := n.nftConn()
	c.FlushRuleset()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	st = await("of the repair after nft flush ruleset", func(st *nodestatus.Status) error {
		if st.Tables.Repairs <= before || st.Tables.LastRepair.Before(flushed.Truncate(time.Second)) {
			return fmt.Errorf("repairs %d (before %d), last %s", st.Tables.Repairs, before, st.Tables.LastRepair)
		}
		return nil
	})
	t.Logf("the report shows the repair %v after the flush: %s", st.Updated.Sub(flushed).Round(time.Second), st.Tables.LastRepaired)
	if err := p.Del(); err != nil {
		t.Fatal(err)
	}
}
