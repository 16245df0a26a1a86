package multinode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/pkg/install"
)

// TestStaleAttachmentCollected: a forwarding pod on node 2 is deleted
// while podwire is out of the chain the runtime reads (its entry taken out
// of flannel's conflist with node 2's agent stopped, as in the moments
// after a primary's installer rewrites the file), so the runtime's DEL
// never reaches podwire: its record, its node route (via cni0, which
// outlives the pod's veth) and its claim stay. With the entry back and the
// agent running again, the agent collects the attachment by the plugin's
// DEL within 2 minutes of the deletion: the record and the route go, a
// Node Event names the pod, and a new pod on node 2 gets the same route.
// Another forwarding pod of node 2, running throughout, keeps its record
// and route. (The agent's postponement while the API cannot answer is
// proven by integration's TestStaleAttachmentCollected and the agent's
// unit tests: cutting a node's agent off the apiserver here would take
// the kubelet's node lease with it.)
func TestStaleAttachmentCollected(t *testing.T) {
	needCluster(t)
	n2 := c.Nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	kubectl(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+forwardingNS+"}\n", "apply", "-f", "-")
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", forwardingNS, "--wait=true", "--timeout=90s") })
	staleNet, keptNet := "198.51.100.0/26", "198.51.100.64/26"
	fwd := func(route string) map[string]string {
		return map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": route}
	}
	for name, route := range map[string]string{"stale": staleNet, "kept": keptNet} {
		if err := createPod(ctx, forwardingNS, name, n2, nil, fwd(route)); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := waitPod(ctx, forwardingNS, "stale", n2)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := waitPod(ctx, forwardingNS, "kept", n2)
	if err != nil {
		t.Fatal(err)
	}
	_, staleID, err := n2.PodNetNS(ctx, stale.uid)
	if err != nil {
		t.Fatal(err)
	}
	_, keptID, err := n2.PodNetNS(ctx, kept.uid)
	if err != nil {
		t.Fatal(err)
	}
	record := func(id string) string { return filepath.Join(n2.Path("/run/podwire"), id+"_eth0.json") }
	route := func(dst string) string {
		out, err := n2.Command(ctx, "ip", "route", "show", dst).CombinedOutput()
		if err != nil {
			t.Fatalf("ip route show %s on %s: %v: %s", dst, n2.Name, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if !strings.Contains(route(staleNet), stale.ip4.String()) || !strings.Contains(route(keptNet), kept.ip4.String()) {
		t.Fatalf("routes on %s: %s: %q, %s: %q", n2.Name, staleNet, route(staleNet), keptNet, route(keptNet))
	}

	// podwire out of the chain while the pod goes: the agent stopped
	// (SIGSTOP, so that it cannot restore the entry), the entry removed,
	// containerd's reload awaited, then the pod deleted and its sandbox
	// removed, the runtime's DELs running flannel's chain alone.
	agentPID := agentProcess(t, n2)
	conflist := filepath.Join(n2.CNIConfDir, "10-flannel.conflist")
	orig, err := os.ReadFile(conflist)
	if err != nil {
		t.Fatal(err)
	}
	stopped := true
	if err := syscall.Kill(agentPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := func() {
		if stopped {
			stopped = false
			if err := syscall.Kill(agentPID, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT to the agent %d: %v", agentPID, err)
			}
		}
	}
	t.Cleanup(resume)
	without, _, err := install.RemoveEntry(orig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conflist, without, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, _ := os.ReadFile(conflist); !bytes.Contains(b, []byte(`"podwire"`)) {
			_ = os.WriteFile(conflist, orig, 0o644)
		}
	})
	if err := cnitest.Eventually(30*time.Second, func() error {
		conf, err := n2.CNIConfig(ctx)
		if err != nil || strings.Contains(conf, `\"type\":\"podwire\"`) || !strings.Contains(conf, `\"type\":\"flannel\"`) {
			return fmt.Errorf("containerd's chain on %s still names podwire (or no flannel): %v", n2.Name, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if err := deletePod(ctx, forwardingNS, "stale"); err != nil {
		t.Fatal(err)
	}
	if err := n2.CollectSandboxes(ctx, stale.uid); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conflist, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	resume()
	if _, err := os.Stat(record(staleID)); err != nil || !strings.Contains(route(staleNet), stale.ip4.String()) {
		t.Fatalf("the DEL reached podwire after all (record: %v, route %q): the test proves nothing", err, route(staleNet))
	}
	t.Logf("pod %s deleted and its sandbox removed without podwire's DEL %v after its entry left the chain; record and route %q stay",
		stale.name, time.Since(deleted).Round(100*time.Millisecond), route(staleNet))

	if err := cnitest.Eventually(2*time.Minute-time.Since(deleted), func() error {
		if _, err := os.Stat(record(staleID)); err == nil {
			return fmt.Errorf("record %s still there", staleID)
		}
		if r := route(staleNet); r != "" {
			return fmt.Errorf("route %q still there", r)
		}
		return nil
	}); err != nil {
		logs, _ := c.Kubectl(ctx, "", "-n", agentNS, "logs", "ds/podwire-agent", "--tail=40")
		t.Fatalf("stale attachment on %s not collected within 2 minutes of its pod's deletion: %v\nagent:\n%s", n2.Name, err, logs)
	}
	t.Logf("stale attachment collected %v after its pod's deletion", time.Since(deleted).Round(time.Second))
	events := kubectl(t, "", "get", "events", "-n", "default", "--field-selector", "reason=PodwireAttachmentCollected,involvedObject.name="+n2.Name,
		"-o", "jsonpath={.items[*].message}")
	if !strings.Contains(events, forwardingNS+"/stale") {
		t.Errorf("no PodwireAttachmentCollected Event on %s naming %s/stale: %q", n2.Name, forwardingNS, events)
	}
	if _, err := os.Stat(record(keptID)); err != nil || !strings.Contains(route(keptNet), kept.ip4.String()) {
		t.Errorf("the running pod's attachment changed: record %v, route %q", err, route(keptNet))
	}

	// The claim is free: a new pod on node 2 gets the same route.
	if err := createPod(ctx, forwardingNS, "new", n2, nil, fwd(staleNet)); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	defer wcancel()
	fresh, err := waitPod(wctx, forwardingNS, "new", n2)
	if err != nil {
		t.Fatalf("a pod asking for the collected route: %v", err)
	}
	if r := route(staleNet); !strings.Contains(r, fresh.ip4.String()) {
		t.Errorf("route after the new pod's ADD: %q, want via %s", r, fresh.ip4)
	}
}

// agentProcess is the PID of the podwire agent of node n: the process
// named podwire-agent whose NODE_NAME (the DaemonSet's spec.nodeName) is
// n's name.
func agentProcess(t *testing.T, n *cluster.Node) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if strings.TrimSpace(string(comm)) != "podwire-agent" {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		for _, kv := range bytes.Split(env, []byte{0}) {
			if string(kv) == "NODE_NAME="+n.Name {
				return pid
			}
		}
	}
	t.Fatalf("no podwire-agent process of %s", n.Name)
	return 0
}
