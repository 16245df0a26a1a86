package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/packets"
	"github.com/podwire/podwire/pkg/install"
)

// TestPodsDuringConflistRewrites: while a loop rewrites node 2's
// conflist without podwire every 100 ms (what flannel's install-cni does
// once per restart, and an operator's tooling may do on a timer), pods
// bound to node 2 start in waves. Each rewrite leaves a window, until the
// agent has put podwire back and containerd has reloaded the chain, in
// which an ADD runs flannel alone; the test goes on until a pod has
// started in one (it has no podwire record: the attack's precondition,
// checked, not assumed). Once the loop stops, every pod's datagrams forged
// from another address are dropped: by the source check where podwire
// wired the pod, by the unknown-interface drop (unknownInterfaces: drop,
// the chart's default) where it did not. TestClosedByDefault's control
// shows such a pod forging when nothing drops it.
func TestPodsDuringConflistRewrites(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	receiver := runPod(t, "default", "rewrites-receiver", n1, nil)
	sink, to := listen(t, receiver, 7407)
	forged := netip.MustParseAddr("10.244.1.249")
	conflist := filepath.Join(n2.CNIConfDir, "10-flannel.conflist")
	without, err := json.MarshalIndent(conflistWithoutPodwire(t, conflist), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	unknownBefore := mustScrape(t, n2).sum("podwire_unknown_interfaces", nil)

	stop := make(chan struct{})
	var rewrites int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			// As flannel's `cp -f`: in place, not renamed over.
			if err := os.WriteFile(conflist, without, 0o644); err == nil {
				rewrites++
			}
		}
	}()
	stopLoop := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoop()

	const perWave, maxWaves = 6, 6
	var pods []*pod
	unrecorded := map[string]bool{}
	for wave := 0; wave < maxWaves && len(unrecorded) == 0; wave++ {
		names := make([]string, perWave)
		for i := range names {
			names[i] = fmt.Sprintf("rewrites-%d-%d", wave, i)
			name := names[i]
			t.Cleanup(func() {
				kubectl(t, "", "delete", "pod", "-n", "default", name, "--ignore-not-found", "--wait=true", "--timeout=90s")
			})
			kubectl(t, boundPodManifest(name, n2, false), "create", "-f", "-")
		}
		for _, name := range names {
			p, err := waitPod(ctx, "default", name, n2)
			if err != nil {
				t.Fatal(err)
			}
			pods = append(pods, p)
			if !recorded(t, ctx, p) {
				unrecorded[p.name] = true
			}
		}
	}
	stopLoop()
	if len(unrecorded) == 0 {
		t.Fatalf("%d pods started during %d rewrites of %s, and podwire wired every one: no ADD ran in a window without podwire, nothing was tested",
			len(pods), rewrites, conflist)
	}
	t.Logf("%d pods started on %s during %d rewrites of its conflist without podwire; %d of them without podwire (no record): %v",
		len(pods), n2.Name, rewrites, len(unrecorded), slices.Sorted(maps.Keys(unrecorded)))
	if err := waitChain(ctx, n2); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitMetric(t, n2, 2*time.Minute, "the unknown interfaces of "+n2.Name, func(s scrape) bool {
		return s.sum("podwire_unknown_interfaces", nil) >= unknownBefore+float64(len(unrecorded))
	})
	t.Logf("%s's agent reports the %d interfaces unknown %v after the loop stopped", n2.Name, len(unrecorded), time.Since(start).Round(100*time.Millisecond))
	// Every pod forges at once; one wait covers them all.
	for _, p := range pods {
		if err := packets.SendFrom(p.netns, forged, to, "forged-"+p.name, 3); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	for _, p := range pods {
		how := "wired by podwire"
		if unrecorded[p.name] {
			how = "started without podwire, unknownInterfaces drop"
		}
		if sink.Got(forged, "forged-"+p.name) {
			t.Errorf("%s on %s, %s: its datagram forged from %s arrived", p.name, n2.Name, how, forged)
		}
	}
	t.Logf("the datagrams forged from %s by all %d pods are dropped", forged, len(pods))
}

// recorded reports whether podwire recorded p's attachment on its node:
// the record of p's sandbox's eth0 in stateDir.
func recorded(t *testing.T, ctx context.Context, p *pod) bool {
	t.Helper()
	sbs, err := p.node.Sandboxes(ctx, p.uid)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if _, err := os.Stat(filepath.Join(p.node.Path("/run/podwire"), sb.Id+"_eth0.json")); err == nil {
			return true
		}
	}
	return false
}

// TestAgentForceDeleted: node 2's agent pod is force-deleted (grace period
// 0) while pods bound to node 2 start. Its bound ServiceAccount token dies
// with the pod object, so the stopping agent's API calls get 401s: the
// agent must take nothing from them (only its DaemonSet's deletion means
// an uninstall). Afterwards node 2 has no uninstall marker, every pod that
// started has its podwire record, and every one's forged datagrams are
// dropped; the DaemonSet's new agent becomes Ready.
func TestAgentForceDeleted(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	receiver := runPod(t, "default", "forcedel-receiver", n1, nil)
	sink, to := listen(t, receiver, 7408)
	forged := netip.MustParseAddr("10.244.1.248")
	agentPod := agentPods(t, n2.Name, "{.items[0].metadata.name}")
	if agentPod == "" {
		t.Fatalf("no agent pod on %s", n2.Name)
	}
	t.Cleanup(func() {
		kubectl(t, "", "-n", agentNS, "rollout", "status", "ds/podwire-agent", "--timeout=180s")
	})

	const n = 8
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("forcedel-%d", i)
		name := names[i]
		t.Cleanup(func() {
			kubectl(t, "", "delete", "pod", "-n", "default", name, "--ignore-not-found", "--wait=true", "--timeout=90s")
		})
	}
	// Half the pods before the deletion, half right after it: their ADDs
	// run while the old agent stops and before the new one is up.
	for _, name := range names[:n/2] {
		kubectl(t, boundPodManifest(name, n2, false), "create", "-f", "-")
	}
	kubectl(t, "", "-n", agentNS, "delete", "pod", agentPod, "--force", "--grace-period=0")
	deleted := time.Now()
	for _, name := range names[n/2:] {
		kubectl(t, boundPodManifest(name, n2, false), "create", "-f", "-")
	}
	var pods []*pod
	for _, name := range names {
		p, err := waitPod(ctx, "default", name, n2)
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	t.Logf("%s's agent %s force-deleted; %d pods started on %s around it, the last %v after the deletion",
		n2.Name, agentPod, n, n2.Name, time.Since(deleted).Round(100*time.Millisecond))

	marker := filepath.Join(n2.Path("/run/podwire"), install.UninstalledName)
	if err := cnitest.Eventually(time.Minute, func() error {
		out := agentPods(t, n2.Name, `{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		if f := strings.Fields(out); len(f) != 2 || f[0] == agentPod || f[1] != "True" {
			return fmt.Errorf("%s's agent pods: %q", n2.Name, out)
		}
		return nil
	}); err != nil {
		t.Fatalf("no new Ready agent: %v", err)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("%s has an uninstall marker after its agent's force-deletion: %s", n2.Name, b)
	}
	for _, p := range pods {
		if !recorded(t, ctx, p) {
			t.Errorf("pod %s on %s has no podwire record: started unchecked", p.name, n2.Name)
		}
		checkedPod(t, sink, to, p, forged, "started around the agent's force-deletion")
	}
	t.Logf("no uninstall marker on %s; its new agent Ready; all %d pods recorded and source-checked", n2.Name, n)
}
