package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// memoryPods and memoryFiller are TestAgentMemoryUnderAnnotations' load:
// pods of one node, each carrying a filler annotation just under the
// apiserver's 256 KiB limit on a pod's annotations in all.
const (
	memoryPods   = 110
	memoryFiller = 250 << 10
)

// TestAgentMemoryUnderAnnotations measures node 2's agent's RSS while
// memoryPods pods bound to node 2 carry memoryFiller bytes of an
// annotation that is not podwire's, and that annotation is rewritten on
// every pod in a loop for a minute: what a tenant can make every pod
// event weigh. The agent's pod informer keeps only what podwire reads
// (name, UID, labels, podwire.io/* annotations), so its cache does not
// grow with the filler; what remains is each event's decoding. The pods
// are bound by spec.nodeName with a nodeSelector no node has, so the
// kubelet refuses them at admission (phase Failed, no sandbox): the agent
// watches the pods of its node by spec.nodeName whatever their phase, and
// the measure costs no container. It prints "agent-memory:" lines and
// fails when the peak RSS passes half the DaemonSet's memory limit. With
// PODWIRE_K8S_MEMORY_OUT it writes the figures as "agentmemory-...: value"
// lines into that file, which `make bench` puts into docs/benchmarks.md.
// Opt-in (PODWIRE_K8S_MEMORY=1, `make bench-k8s`): a benchmark, not a
// behaviour test.
func TestAgentMemoryUnderAnnotations(t *testing.T) {
	if os.Getenv("PODWIRE_K8S_MEMORY") == "" {
		t.Skip("opt-in: PODWIRE_K8S_MEMORY=1 (make bench-k8s)")
	}
	needCluster(t)
	n := c.Nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	limit := resource.MustParse(strings.TrimSpace(kubectl(t, "", "-n", agentNS, "get", "ds", "podwire-agent", "-o",
		`jsonpath={.spec.template.spec.containers[?(@.name=="agent")].resources.limits.memory}`)))
	pid := agentProcess(t, n)
	rss := func() float64 {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb * 1024
			}
		}
		t.Fatalf("no VmRSS for the agent (PID %d) of %s", pid, n.Name)
		return 0
	}
	const mib = 1 << 20
	before := rss()

	ns := "agent-memory"
	kubectl(t, "", "create", "namespace", ns)
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", ns, "--wait=true", "--timeout=180s") })
	filler := func(round int) string { return strings.Repeat(string(rune('a'+round%26)), memoryFiller) }
	start := time.Now()
	peak := before
	for i := range memoryPods {
		pod := map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": fmt.Sprintf("filler-%d", i), "annotations": map[string]string{"example.com/filler": filler(0)}},
			"spec": map[string]any{
				"nodeName": n.Name, "nodeSelector": map[string]string{"podwire-test/no-such-node": "true"},
				"automountServiceAccountToken": false,
				"containers":                   []map[string]any{{"name": "main", "image": "never-pulled.invalid/none"}},
			}}
		b, _ := json.Marshal(pod)
		if _, err := c.API(ctx, "POST", "/api/v1/namespaces/"+ns+"/pods", b); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, rss())
	}
	created := time.Since(start)
	rounds, patches := 0, 0
	for t0 := time.Now(); time.Since(t0) < time.Minute; rounds++ {
		for i := range memoryPods {
			b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"example.com/filler": filler(rounds + 1)}}})
			if _, err := c.API(ctx, "PATCH", fmt.Sprintf("/api/v1/namespaces/%s/pods/filler-%d", ns, i), b); err != nil {
				t.Fatal(err)
			}
			patches++
			if i%10 == 0 {
				peak = max(peak, rss())
			}
		}
	}
	if pid != agentProcess(t, n) {
		t.Fatalf("%s's agent restarted during the measure (OOM-killed at its %s limit?)", n.Name, limit.String())
	}
	half := float64(limit.Value()) / 2
	fmt.Printf("agent-memory: %d pods of %s with %d KiB of annotations each, created in %v, then %d patches of it in %d rounds over a minute: agent RSS %.1f MiB before, peak %.1f MiB (limit %s, half %.0f MiB)\n",
		memoryPods, n.Name, memoryFiller>>10, created.Round(time.Second), patches, rounds, before/mib, peak/mib, limit.String(), half/mib)
	if peak > half {
		t.Errorf("%s's agent: RSS peak %.1f MiB, over half its %s limit", n.Name, peak/mib, limit.String())
	}
	if out := os.Getenv("PODWIRE_K8S_MEMORY_OUT"); out != "" {
		figures := fmt.Sprintf("agentmemory-date: %s\nagentmemory-pods: %d\nagentmemory-filler-kib: %d\nagentmemory-patches: %d\n"+
			"agentmemory-rss-before-mib: %.1f\nagentmemory-rss-peak-mib: %.1f\nagentmemory-limit-mib: %.0f\n",
			time.Now().UTC().Format("2006-01-02 15:04 UTC"), memoryPods, memoryFiller>>10, patches, before/mib, peak/mib, float64(limit.Value())/mib)
		if err := os.WriteFile(out, []byte(figures), 0o644); err != nil {
			t.Error(err)
		}
	}
}
