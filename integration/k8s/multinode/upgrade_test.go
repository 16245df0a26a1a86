package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// The operator's lifecycle, last in the package (this file sorts last,
// and the uninstall is its last test): `helm upgrade` to a second version
// pushed to the run's registry, then `helm uninstall`.

// tagOf is the tag of an image reference REPOSITORY:TAG[@DIGEST].
func tagOf(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	return ref[strings.LastIndex(ref, ":")+1:]
}

// pluginVersion runs node n's installed plugin (the one the runtime
// execs) with `version`, and returns its first line.
func pluginVersion(t *testing.T, n *cluster.Node) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := n.Command(ctx, "/opt/cni/bin/podwire", "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: podwire version: %v\n%s", n.Name, err, out)
	}
	return strings.SplitN(string(out), "\n", 2)[0]
}

// TestHelmUpgrade: `helm upgrade` with the same values and a second
// version of the image (`make image-upgrade`, pushed with `make push`'s
// command, pinned by digest) rolls the agents node by node; then every
// node's agent and installed plugin report the new version, a pod wired
// by the old version is still checked (its forged datagrams dropped, its
// own delivered), and a pod created after is wired by the new one. Pods
// are created all through the rollout (one every 500 ms, the nodes in
// turn): every one becomes Ready with no failed sandbox creation, i.e.
// no ADD found the node without an agent.
func TestHelmUpgrade(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	old := runPod(t, "default", "before-upgrade", n2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pinned, err := pushPodwire(ctx, upgradeImage, upgradeRef)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	churn := startChurn(ctx, t, "rollout", 500*time.Millisecond)
	if err := helm(ctx, "upgrade", pinned); err != nil {
		t.Fatal(err)
	}
	want := tagOf(upgradeRef)
	for _, n := range c.Nodes {
		waitMetric(t, n, 60*time.Second, "the agent of version "+want, func(s scrape) bool {
			return s.label("podwire_agent_build_info", "version") == want
		})
		if v := pluginVersion(t, n); !strings.Contains(v, want) {
			t.Errorf("%s: the installed plugin says %q after the upgrade, want version %s", n.Name, v, want)
		}
	}
	t.Logf("upgraded to %s on %d nodes in %v", want, len(c.Nodes), time.Since(start).Round(time.Second))
	churned := churn.stop(t)
	for _, p := range churned {
		if _, err := waitPod(ctx, p.namespace, p.name, p.node); err != nil {
			t.Errorf("a pod created during the rollout: %v", err)
		}
	}
	if failed := sandboxFailures(t, ctx, "rollout-"); len(failed) > 0 {
		t.Errorf("%d sandbox creations failed during the rollout (each a failed ADD the kubelet retried):\n%s",
			len(failed), strings.Join(failed, "\n"))
	}
	t.Logf("%d pods created during the rollout (one every 500 ms, both nodes in turn), every one Ready with no failed ADD", len(churned))
	for _, p := range churned {
		_ = deletePod(ctx, p.namespace, p.name)
	}

	receiver := runPod(t, "default", "after-upgrade", n1, nil)
	const port = 7402
	sink, err := packets.NewSink(receiver.netns, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	to := netip.AddrPortFrom(receiver.ip4, port)
	forged := netip.MustParseAddr("10.244.0.251")
	if err := packets.SendFrom(old.netns, forged, to, "forged", 5); err != nil {
		t.Fatal(err)
	}
	if err := packets.SendFrom(old.netns, old.ip4, to, "genuine", 5); err != nil {
		t.Fatal(err)
	}
	if !sink.WaitGot(old.ip4, "genuine", 10*time.Second) {
		t.Fatalf("the genuine datagrams of the pod wired before the upgrade did not reach the pod wired after it")
	}
	time.Sleep(200 * time.Millisecond)
	if sink.Got(forged, "forged") {
		t.Errorf("after the upgrade, a datagram forged from %s by the pod wired before it reached %s", forged, to)
	}
}

// churn creates a pod every interval, on the nodes in turn, until stop.
type churn struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	pods   []*pod
	err    error
}

// startChurn starts creating pods named PREFIX-N (not waiting for them).
func startChurn(ctx context.Context, t *testing.T, prefix string, interval time.Duration) *churn {
	ctx, cancel := context.WithCancel(ctx)
	ch := &churn{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ch.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			n := c.Nodes[i%len(c.Nodes)]
			name := fmt.Sprintf("%s-%d", prefix, i)
			err := createPod(ctx, "default", name, n, map[string]string{"churn": prefix}, nil)
			ch.mu.Lock()
			if err != nil && ctx.Err() == nil && ch.err == nil {
				ch.err = err
			}
			if err == nil {
				ch.pods = append(ch.pods, &pod{namespace: "default", name: name, node: n})
			}
			ch.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ch.cancel()
		<-ch.done
		for _, p := range ch.pods {
			_ = deletePod(context.Background(), p.namespace, p.name)
		}
	})
	return ch
}

// stop stops the churn and returns the pods it created.
func (ch *churn) stop(t *testing.T) []*pod {
	t.Helper()
	ch.cancel()
	<-ch.done
	if ch.err != nil {
		t.Fatalf("churn: %v", ch.err)
	}
	return ch.pods
}

// sandboxFailures lists the FailedCreatePodSandBox events of the default
// namespace's pods whose names start with prefix.
func sandboxFailures(t *testing.T, ctx context.Context, prefix string) []string {
	t.Helper()
	b, err := c.API(ctx, "GET", "/api/v1/namespaces/default/events?fieldSelector=reason%3DFailedCreatePodSandBox", nil)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []struct {
			InvolvedObject struct{ Name string } `json:"involvedObject"`
			Message        string                `json:"message"`
			Count          int                   `json:"count"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, ev := range list.Items {
		if strings.HasPrefix(ev.InvolvedObject.Name, prefix) {
			failed = append(failed, fmt.Sprintf("%s (x%d): %s", ev.InvolvedObject.Name, ev.Count, ev.Message))
		}
	}
	return failed
}

// TestHelmUninstall: `helm uninstall` removes the agents; then no node's
// conflist names podwire, a node with no pod that podwire wired has no
// podwire binary, tables or state left, and a pod wired before the
// uninstall is still deleted cleanly (the runtime's cached config names
// podwire): after its DEL its node is as clean. The nodes then run pods
// with flannel alone.
func TestHelmUninstall(t *testing.T) {
	needCluster(t)
	n2 := c.Nodes[1]
	wired := runPod(t, "default", "before-uninstall", n2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	if out, err := c.Helm(ctx, helmBin, "uninstall", release, "--namespace", releaseNS, "--wait", "--timeout", "3m"); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("helm uninstall: %s", strings.TrimSpace(out))
	}
	for {
		_, err := c.API(ctx, "GET", "/api/v1/namespaces/"+agentNS, nil)
		if err != nil && strings.Contains(err.Error(), "404") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("namespace %s still there after helm uninstall: %v", agentNS, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the agents and their namespace are gone %v after helm uninstall", time.Since(start).Round(time.Millisecond))
	for _, n := range c.Nodes {
		for _, f := range conflistsNaming(t, n, "podwire") {
			t.Errorf("%s: %s still names podwire after the uninstall", n.Name, f)
		}
	}
	// Node 1 has no pod that podwire wired: nothing of podwire is left.
	nodeClean(t, ctx, c.Nodes[0])
	if _, err := os.Stat(n2.Path("/opt/cni/bin/podwire")); err != nil {
		t.Errorf("%s: the plugin binary is gone while the pod it wired still runs: %v", n2.Name, err)
	}

	start = time.Now()
	if err := deletePod(ctx, wired.namespace, wired.name); err != nil {
		t.Fatal(err)
	}
	waitNoPod(t, ctx, wired)
	waitSandboxGone(t, ctx, wired)
	t.Logf("the pod wired before the uninstall deleted, its sandbox removed (its DEL run), in %v", time.Since(start).Round(time.Millisecond))
	nodeClean(t, ctx, n2)

	// flannel alone wires pods now.
	after := runPod(t, "default", "after-uninstall", n2, nil)
	t.Logf("a pod after the uninstall: %s %s", after.ip4, after.ip6)
}

// conflistsNaming lists n's CNI config files that contain s.
func conflistsNaming(t *testing.T, n *cluster.Node, s string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(n.CNIConfDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var naming []string
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), s) {
			naming = append(naming, filepath.Base(f))
		}
	}
	return naming
}

// nodeClean checks that node n holds nothing of podwire: no binary, no
// stateDir, no nftables table of podwire's.
func nodeClean(t *testing.T, ctx context.Context, n *cluster.Node) {
	t.Helper()
	for _, p := range []string{"/opt/cni/bin/podwire", "/run/podwire"} {
		if _, err := os.Stat(n.Path(p)); err == nil {
			left := ""
			if ents, err := os.ReadDir(n.Path(p)); err == nil {
				for _, e := range ents {
					left += " " + e.Name()
				}
			}
			t.Errorf("%s: %s is still there after the uninstall%s", n.Name, p, left)
		}
	}
	out, err := n.Command(ctx, "nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: nft list tables: %v\n%s", n.Name, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && strings.HasPrefix(f[2], "podwire") {
			t.Errorf("%s: %s is still there after the uninstall", n.Name, l)
		}
	}
}

// waitSandboxGone waits until p's node has removed p's sandbox: the
// runtime has run the CNI DEL by then (the API drops the pod object
// before that).
func waitSandboxGone(t *testing.T, ctx context.Context, p *pod) {
	t.Helper()
	for {
		s, err := p.node.Sandboxes(ctx, p.uid)
		if err == nil && len(s) == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the sandbox of %s/%s is still on %s: %v %v", p.namespace, p.name, p.node.Name, s, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitNoPod waits until p is gone from the API.
func waitNoPod(t *testing.T, ctx context.Context, p *pod) {
	t.Helper()
	for {
		_, err := c.API(ctx, "GET", "/api/v1/namespaces/"+p.namespace+"/pods/"+p.name, nil)
		if err != nil && strings.Contains(err.Error(), "404") {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("pod %s/%s not deleted: %v", p.namespace, p.name, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
