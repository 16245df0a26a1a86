package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/k8s/cluster"
)

// startupTaint is the chart's default startup taint, with which the
// suite's kubelets register their Nodes (NoExecute); the agents put it back
// with the chart's default startupTaintEffect, NoSchedule.
const startupTaint = "podwire.io/agent-not-ready"

// earlyPending is what the scheduler said of the early Deployment's pod,
// created before podwire was installed (createEarlyDeployment).
var earlyPending string

// deploymentManifest is a Deployment of one pause pod in the default
// namespace, labelled app=NAME, with a nodeSelector when node is set.
func deploymentManifest(name, node string) string {
	sel := ""
	if node != "" {
		sel = fmt.Sprintf("      nodeSelector: {kubernetes.io/hostname: %s}\n", node)
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
%[2]s      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      containers: [{name: main, image: %[3]s, imagePullPolicy: Never}]
`, name, sel, cluster.PauseImage)
}

// scheduling is the PodScheduled condition of the pod labelled app=NAME
// ("" while there is none), and the node it was bound to.
func scheduling(ctx context.Context, name string) (cond, node, pod string, err error) {
	b, err := c.API(ctx, "GET", "/api/v1/namespaces/default/pods?labelSelector=app%3D"+name, nil)
	if err != nil {
		return "", "", "", err
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct {
				NodeName string `json:"nodeName"`
			}
			Status struct {
				Conditions []struct{ Type, Status, Reason, Message string }
			}
		}
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return "", "", "", err
	}
	if len(list.Items) == 0 {
		return "", "", "", nil
	}
	p := list.Items[0]
	for _, cd := range p.Status.Conditions {
		if cd.Type == "PodScheduled" {
			cond = fmt.Sprintf("%s %s: %s", cd.Status, cd.Reason, cd.Message)
		}
	}
	return cond, p.Spec.NodeName, p.Metadata.Name, nil
}

// waitUnschedulable waits until the pod of Deployment name is reported
// unschedulable and returns the scheduler's message.
func waitUnschedulable(ctx context.Context, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		cond, node, _, err := scheduling(ctx, name)
		if err != nil {
			return "", err
		}
		if node != "" {
			return "", fmt.Errorf("the pod of %s was scheduled to %s", name, node)
		}
		if strings.HasPrefix(cond, "False Unschedulable") {
			return cond, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the pod of %s: no Unschedulable condition (%q): %w", name, cond, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// createEarlyDeployment creates the Deployment "early" while no agent
// runs, and records what the scheduler says of its pod.
func createEarlyDeployment(ctx context.Context) error {
	if _, err := c.Kubectl(ctx, deploymentManifest("early", ""), "apply", "-f", "-"); err != nil {
		return err
	}
	msg, err := waitUnschedulable(ctx, "early")
	if err != nil {
		return fmt.Errorf("before podwire's install: %w", err)
	}
	// The scheduler names no taint in its message: record the nodes'.
	var taints []string
	for _, n := range c.Nodes {
		st, err := n.Status()
		if err != nil {
			return err
		}
		taints = append(taints, fmt.Sprintf("%s %v", n.Name, st.Taints))
	}
	earlyPending = fmt.Sprintf("%s (taints: %s)", msg, strings.Join(taints, ", "))
	return nil
}

// waitScheduledPod waits until the pod of Deployment name is Ready and
// returns it.
func waitScheduledPod(t *testing.T, ctx context.Context, name string) *pod {
	t.Helper()
	var nodeName, podName string
	for nodeName == "" {
		_, n, p, err := scheduling(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		nodeName, podName = n, p
		select {
		case <-ctx.Done():
			t.Fatalf("the pod of %s was not scheduled: %v", name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	i := slices.IndexFunc(c.Nodes, func(n *cluster.Node) bool { return n.Name == nodeName })
	if i < 0 {
		t.Fatalf("the pod of %s is on unknown node %q", name, nodeName)
	}
	p, err := waitPod(ctx, "default", podName, c.Nodes[i])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// taintEffect is the effect of node n's startup taint ("" when it has
// none).
func taintEffect(t *testing.T, n *cluster.Node) string {
	t.Helper()
	s, err := n.Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range s.Taints {
		if key, effect, _ := strings.Cut(tn, ":"); key == startupTaint {
			return effect
		}
	}
	return ""
}

// hasTaint reports whether node n carries the startup taint, whatever its
// effect.
func hasTaint(t *testing.T, n *cluster.Node) bool {
	t.Helper()
	return taintEffect(t, n) != ""
}

// TestStartupTaint: the nodes register with the startup taint (NoExecute),
// so a pod the scheduler places waits for podwire:
//   - the early Deployment, created before podwire's install, was
//     unschedulable then for the taint; its pod runs now, checked (a
//     forged datagram dropped, its own delivered);
//   - both agents removed the taint;
//   - when the file the runtime reads on node 2 stops chaining podwire
//     (Multus's 00-multus.conf appears, its delegate a copy of flannel's
//     conflist without podwire, as before Multus follows the primary),
//     node 2's agent puts the taint back, NoSchedule (the chart's
//     startupTaintEffect), and a pod for node 2 waits;
//     once the file goes, the taint goes and the pod runs, checked.
func TestStartupTaint(t *testing.T) {
	needCluster(t)
	if !strings.Contains(earlyPending, "untolerated taint") || strings.Count(earlyPending, startupTaint+":NoExecute") != len(c.Nodes) {
		t.Fatalf("before podwire's install the early pod was %q, want unschedulable for the taint %s", earlyPending, startupTaint)
	}
	t.Logf("before podwire's install: %s", earlyPending)
	// Foreground: the pods go before the Deployments, so that no pod
	// podwire wired outlives the test (TestHelmUninstall counts them).
	t.Cleanup(func() {
		kubectl(t, "", "delete", "deployment", "early", "late", "--ignore-not-found", "--cascade=foreground", "--wait=true", "--timeout=90s")
	})
	n1, n2 := c.Nodes[0], c.Nodes[1]
	receiver := runPod(t, "default", "taint-receiver", n1, nil)
	sink, to := listen(t, receiver, 7404)
	forged := netip.MustParseAddr("203.0.113.77")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	checkedPod(t, sink, to, waitScheduledPod(t, ctx, "early"), forged, "scheduled once its node's taint went")
	for _, n := range c.Nodes {
		if hasTaint(t, n) {
			t.Errorf("%s still carries %s with its agent Ready", n.Name, startupTaint)
		}
	}

	// Node 2's runtime now reads Multus's file, whose delegate lacks
	// podwire.
	delegate := conflistWithoutPodwire(t, filepath.Join(n2.CNIConfDir, "10-flannel.conflist"))
	multus, _ := json.Marshal(map[string]any{"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus",
		"kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig", "delegates": []any{delegate}})
	multusPath := filepath.Join(n2.CNIConfDir, "00-multus.conf")
	if err := os.WriteFile(multusPath, multus, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(multusPath) })
	start := time.Now()
	if err := cnitest.Eventually(20*time.Second, func() error {
		if e := taintEffect(t, n2); e != "NoSchedule" {
			return fmt.Errorf("%s has no %s:NoSchedule (effect %q)", n2.Name, startupTaint, e)
		}
		return nil
	}); err != nil {
		t.Fatalf("with podwire out of the runtime's chain: %v", err)
	}
	t.Logf("%s's agent put %s back %v after the runtime's file stopped chaining podwire", n2.Name, startupTaint, time.Since(start).Round(100*time.Millisecond))
	kubectl(t, deploymentManifest("late", n2.Name), "apply", "-f", "-")
	msg, err := waitUnschedulable(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a pod for %s meanwhile: %s", n2.Name, msg)
	if err := os.Remove(multusPath); err != nil {
		t.Fatal(err)
	}
	checkedPod(t, sink, to, waitScheduledPod(t, ctx, "late"), forged, "scheduled once its node's taint went")
	if hasTaint(t, n2) {
		t.Errorf("%s still carries %s", n2.Name, startupTaint)
	}
	t.Logf("the file gone, %s's taint went and the waiting pod runs, checked", n2.Name)
}

// conflistWithoutPodwire is the conflist at path, parsed, with podwire's
// entry taken out of its plugins.
func conflistWithoutPodwire(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	plugins, _ := conf["plugins"].([]any)
	conf["plugins"] = slices.DeleteFunc(plugins, func(p any) bool {
		m, _ := p.(map[string]any)
		return m["type"] == "podwire"
	})
	return conf
}
