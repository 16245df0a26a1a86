package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/cnitest"
)

// agentPodwireNodePolicy narrows the agent's writes of PodwireNodes to its
// own node's.
const agentPodwireNodePolicy = "podwire-agent-podwirenode"

// TestAgentWritesOnlyItsOwnPodwireNode: root on node 1, with the agent's
// token read there, may write node 1's PodwireNode (the one the agent
// writes) but not node 2's, which the chart's podwire-agent-podwirenode
// policy refuses, naming itself. A forged PodwireNode makes every agent
// read that Node once and keep the Node's data (pkg/agent's
// TestNodeSourceFollowsMirrors), so the policy bounds load, not trust.
// Control: with the policy's binding deleted, the same token writes node
// 2's PodwireNode; with the binding back, it no longer can. The same for
// the PodwireNodeStatus, the report kubectl podwire and helm test read: a
// forged one would report node 2 healthy.
func TestAgentWritesOnlyItsOwnPodwireNode(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	for _, n := range []string{n1.Name, n2.Name} {
		for _, kind := range []string{"podwirenode", "podwirenodestatus"} {
			if err := cnitest.Eventually(30*time.Second, func() error {
				_, err := c.Kubectl(t.Context(), "", "get", kind, n)
				return err
			}); err != nil {
				t.Fatalf("no %s %s: its agent has not written it: %v", kind, n, err)
			}
		}
	}
	agent, _ := tokenUser(t, "agent-token-of-"+n1.Name, agentToken(t, n1))
	const key = "podwire-test/attack"
	t.Cleanup(func() {
		for _, n := range []string{n1.Name, n2.Name} {
			_, _ = c.Kubectl(context.Background(), "", "annotate", "podwirenode", n, key+"-")
			_, _ = c.Kubectl(context.Background(), "", "annotate", "podwirenodestatus", n, key+"-")
		}
	})
	// A PUT, as the agent writes (its ClusterRole grants update, not
	// patch): the object of kind (podwirenode, podwirenodestatus) as it
	// is, annotated.
	annotatedKind := func(kind, node, value string) []string {
		t.Helper()
		var u map[string]any
		if err := json.Unmarshal([]byte(kubectl(t, "", "get", kind, node, "-o", "json")), &u); err != nil {
			t.Fatal(err)
		}
		meta := u["metadata"].(map[string]any)
		delete(meta, "resourceVersion") // unconditional
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
		}
		ann[key] = value
		meta["annotations"] = ann
		b, _ := json.Marshal(u)
		f := filepath.Join(t.TempDir(), kind+"-"+node+".json")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"replace", "-f", f}
	}
	annotated := func(node, value string) []string { return annotatedKind("podwirenode", node, value) }
	agent.denied(t, "write node 2's PodwireNode", agentPodwireNodePolicy, []string{"its own node's PodwireNode", "not PodwireNode " + n2.Name},
		annotated(n2.Name, "1")...)
	agent.must(t, annotated(n1.Name, "1")...)
	t.Logf("%s may write its own node's PodwireNode %s", agent.name, n1.Name)
	agent.denied(t, "write node 2's PodwireNodeStatus", agentPodwireNodePolicy,
		[]string{"its own node's PodwireNodeStatus", "not PodwireNodeStatus " + n2.Name},
		annotatedKind("podwirenodestatus", n2.Name, "1")...)
	agent.must(t, annotatedKind("podwirenodestatus", n1.Name, "1")...)
	t.Logf("%s may write its own node's PodwireNodeStatus %s", agent.name, n1.Name)

	// Control: the binding gone, the same token writes node 2's.
	restore := withoutBinding(t, agentPodwireNodePolicy)
	if err := cnitest.Eventually(20*time.Second, func() error {
		_, err := agent.run(annotated(n2.Name, "1")...)
		return err
	}); err != nil {
		t.Fatalf("control: without the binding the agent's token still cannot write PodwireNode %s: %v", n2.Name, err)
	}
	t.Logf("control: without the binding %s, the agent's token of %s writes PodwireNode %s", agentPodwireNodePolicy, n1.Name, n2.Name)
	if err := cnitest.Eventually(20*time.Second, func() error {
		_, err := agent.run(annotatedKind("podwirenodestatus", n2.Name, "1")...)
		return err
	}); err != nil {
		t.Fatalf("control: without the binding the agent's token still cannot write PodwireNodeStatus %s: %v", n2.Name, err)
	}
	t.Logf("control: without the binding, it writes PodwireNodeStatus %s too", n2.Name)
	restore()
	// A new value each try, so that each is a change.
	try := 1
	if err := cnitest.Eventually(20*time.Second, func() error {
		try++
		out, err := agent.run(annotated(n2.Name, fmt.Sprint(try))...)
		if err == nil || !strings.Contains(err.Error(), agentPodwireNodePolicy) {
			return fmt.Errorf("wrote PodwireNode %s: %v %s", n2.Name, err, out)
		}
		return nil
	}); err != nil {
		t.Fatalf("with the binding back: %v", err)
	}
	t.Logf("with the binding back, the write is refused again")
}
