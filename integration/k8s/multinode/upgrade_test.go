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
// command, pinned by digest) rolls the agents node by node while pods are
// created and deleted on both nodes (a pod every 500 ms while the nodes keep up, the nodes in
// turn, each deleted 8 s after its creation), as a rolling upgrade
// must allow:
//   - no sandbox creation or deletion fails (no FailedCreatePodSandBox
//     event of a churned pod, and no FailedKillPod event of one that names
//     its sandbox's teardown: no ADD found the node without an agent, no
//     DEL failed);
//   - no pod is unchecked at any sample: a pod wired before the upgrade
//     sends a forged datagram every 250 ms all through the rollout, none
//     arrives, while its genuine ones do; and every churned pod still
//     running at the end is checked (its forged datagram dropped);
//   - every node's agent and installed plugin end at the new version.
func TestHelmUpgrade(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	old := runPod(t, "default", "before-upgrade", n2, nil)
	receiver := runPod(t, "default", "upgrade-receiver", n1, nil)
	sink, to := listen(t, receiver, 7402)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pinned, err := c.PushArchive(ctx, upgradeImage, upgradeRef)
	if err != nil {
		t.Fatal(err)
	}

	// The sampler: a forged and a genuine datagram every 250 ms from the
	// pod wired before the upgrade.
	forged := netip.MustParseAddr("10.244.0.251")
	sampleCtx, stopSampling := context.WithCancel(ctx)
	samples := make(chan int, 1)
	go func() {
		n := 0
		defer func() { samples <- n }()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
			_ = packets.SendFrom(old.netns, forged, to, "forged", 1)
			_ = packets.SendFrom(old.netns, old.ip4, to, "genuine", 1)
			n++
		}
	}()

	start := time.Now()
	churn := startChurn(ctx, t, "rollout", 500*time.Millisecond, 16)
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
	rollout := time.Since(start)
	created, running := churn.stop(t)
	stopSampling()
	sampled := <-samples
	t.Logf("upgraded to %s on %d nodes in %v; %d pods created meanwhile (%.1f/s; %d ticks skipped for the nodes' backlog), %d deleted",
		want, len(c.Nodes), rollout.Round(time.Second), created, float64(created)/rollout.Seconds(), churn.skipped, created-len(running))

	if sink.Got(forged, "forged") {
		t.Errorf("during the rollout a datagram forged from %s by the pod wired before it reached %s", forged, to)
	}
	if !sink.Got(old.ip4, "genuine") {
		t.Errorf("none of the %d genuine datagrams sent during the rollout from %s reached %s", sampled, old.ip4, to)
	}
	// Every churned pod still running: Ready, and checked.
	for _, p := range running {
		q, err := waitPod(ctx, p.namespace, p.name, p.node)
		if err != nil {
			t.Errorf("a pod created during the rollout: %v", err)
			continue
		}
		checkedPod(t, sink, to, q, netip.MustParseAddr("203.0.113.99"), "created during the rollout")
	}
	churn.deleteAll(ctx)
	waitNoPods(t, ctx, "churn=rollout")
	if failed := sandboxFailures(t, ctx, "rollout-"); len(failed) > 0 {
		t.Errorf("%d sandbox creations or deletions failed during the rollout:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	t.Logf("%d samples of the old pod during the rollout: every forged one dropped, genuine ones delivered; %d pods running at its end, each checked; no sandbox creation or deletion failed",
		sampled, len(running))
}

// churn creates a pod every interval, on the nodes in turn, and deletes
// each lifetime pods later (0: never), until stop.
type churn struct {
	prefix string
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	pods   []*pod // created and not deleted
	total  int
	// skipped counts the ticks with no pod created: the nodes were behind
	// (backlog).
	skipped int
	err     error
}

// churnBacklog is how many pods beyond lifetime may still exist (being
// created, or deleted and not torn down yet) before a tick creates none:
// on a slow machine the nodes' sandbox teardowns (netns cleanup under the
// kernel's rtnl lock) fall behind two pods a second, and without a bound
// the backlog feeds itself until nothing else on the node gets done.
const churnBacklog = 8

// churnPods is the number of pods labelled churn=prefix that exist.
func churnPods(ctx context.Context, prefix string) (int, error) {
	b, err := c.API(ctx, "GET", "/api/v1/namespaces/default/pods?labelSelector=churn%3D"+prefix, nil)
	if err != nil {
		return 0, err
	}
	var list struct{ Items []json.RawMessage }
	if err := json.Unmarshal(b, &list); err != nil {
		return 0, err
	}
	return len(list.Items), nil
}

// startChurn starts creating pods named PREFIX-N, labelled churn=PREFIX
// (not waiting for them), one per interval while fewer than lifetime +
// churnBacklog of them exist.
//
// stop ends the loop between two requests, never during one: a POST
// cancelled in flight may still create its pod while the client sees
// "context canceled", and that pod would escape the bookkeeping (it did,
// in CI: a last pod that nothing deleted). The requests use ctx, the
// test's own deadline.
func startChurn(ctx context.Context, t *testing.T, prefix string, interval time.Duration, lifetime int) *churn {
	loop, cancel := context.WithCancel(ctx)
	ch := &churn{prefix: prefix, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ch.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-loop.Done():
				return
			case <-tick.C:
			}
			if lifetime > 0 {
				if k, err := churnPods(ctx, prefix); err == nil && k >= lifetime+churnBacklog {
					ch.mu.Lock()
					ch.skipped++
					ch.mu.Unlock()
					continue
				}
			}
			n := c.Nodes[i%len(c.Nodes)]
			name := fmt.Sprintf("%s-%d", prefix, i)
			err := createPod(ctx, "default", name, n, map[string]string{"churn": prefix}, nil)
			ch.mu.Lock()
			if err == nil {
				ch.total++
				ch.pods = append(ch.pods, &pod{namespace: "default", name: name, node: n})
				if lifetime > 0 && len(ch.pods) > lifetime {
					p := ch.pods[0]
					ch.pods = ch.pods[1:]
					err = deletePod(ctx, p.namespace, p.name)
				}
			}
			if err != nil && ch.err == nil {
				ch.err = err
			}
			ch.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ch.cancel()
		<-ch.done
		ch.deleteAll(context.Background())
	})
	return ch
}

// stop stops the churn and returns how many pods it created and those
// not deleted.
func (ch *churn) stop(t *testing.T) (int, []*pod) {
	t.Helper()
	ch.cancel()
	<-ch.done
	if ch.err != nil {
		t.Fatalf("churn: %v", ch.err)
	}
	return ch.total, ch.pods
}

// deleteAll deletes the pods the churn left: every pod labelled
// churn=PREFIX, whether or not its creation was seen to succeed.
func (ch *churn) deleteAll(ctx context.Context) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	_, _ = c.API(ctx, "DELETE", "/api/v1/namespaces/default/pods?labelSelector=churn%3D"+ch.prefix, nil)
	ch.pods = nil
}

// sandboxFailures lists the FailedCreatePodSandBox events (a failed CNI
// ADD) and the FailedKillPod events whose message names KillPodSandbox (a
// failed teardown, CNI DEL included) of the default namespace's pods whose
// names start with prefix. A FailedKillPod that names only KillContainer
// is the runtime failing to stop an app container (containerd's shim
// closing its ttrpc connection while a loaded node kills it), which runs
// no CNI: it is logged, not counted.
func sandboxFailures(t *testing.T, ctx context.Context, prefix string) []string {
	t.Helper()
	b, err := c.API(ctx, "GET", "/api/v1/namespaces/default/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []struct {
			InvolvedObject struct{ Name string } `json:"involvedObject"`
			Reason         string                `json:"reason"`
			Message        string                `json:"message"`
			Count          int                   `json:"count"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, ev := range list.Items {
		if !strings.HasPrefix(ev.InvolvedObject.Name, prefix) {
			continue
		}
		line := fmt.Sprintf("%s %s (x%d): %s", ev.Reason, ev.InvolvedObject.Name, ev.Count, ev.Message)
		switch {
		case ev.Reason == "FailedCreatePodSandBox",
			ev.Reason == "FailedKillPod" && strings.Contains(ev.Message, "KillPodSandbox"):
			failed = append(failed, line)
		case ev.Reason == "FailedKillPod":
			t.Logf("not a sandbox's failure (no CNI call): %s", line)
		}
	}
	return failed
}

// TestHelmUninstall: `helm uninstall` removes the agents; then a node
// with no pod that podwire wired keeps nothing of podwire: no conflist
// names it, and it has no binary, stateDir or table of podwire's. On a
// node where a pod podwire wired still runs, podwire stays in the chain
// (containerd tears a pod down with the chain it has then, so the entry
// must outlive the pods it wired) until that pod is deleted: its DEL, the
// last, takes podwire out and leaves the node as clean. The nodes then run
// pods with flannel alone.
func TestHelmUninstall(t *testing.T) {
	needCluster(t)
	n2 := c.Nodes[1]
	wired := runPod(t, "default", "before-uninstall", n2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The agents' last words (their decision at the stop) are lost with
	// their pods: follow their logs from now on, for a failure's message.
	logs := followAgentLogs(t, ctx)
	defer func() {
		if t.Failed() {
			t.Logf("the agents' logs:\n%s", logs.String())
		}
	}()
	// The cluster's DNS (installed by the tests that need it) runs pods
	// that podwire wired on both nodes, for which an uninstall rightly
	// keeps podwire: this test needs node 1 without one, so the DNS goes.
	kubectl(t, "", "-n", "kube-system", "delete", "deployment", "coredns", "--ignore-not-found",
		"--cascade=foreground", "--wait=true", "--timeout=120s")
	// Node 1's earlier pods are all deleted, but the API drops a pod
	// object before the kubelet's teardown runs its DEL: until then podwire
	// rightly stays for it. Wait for those DELs.
	waitNoAttachments(t, ctx, c.Nodes[0])
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
	// Node 1 has no pod that podwire wired: nothing of podwire is left.
	nodeClean(t, ctx, c.Nodes[0])
	if _, err := os.Stat(n2.Path("/opt/cni/bin/podwire")); err != nil {
		t.Errorf("%s: the plugin binary is gone while the pod it wired still runs: %v", n2.Name, err)
	}
	if len(conflistsNaming(t, n2, `"podwire"`)) == 0 {
		t.Errorf("%s: podwire left the chain while the pod it wired still runs: its DEL would never run podwire", n2.Name)
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

// syncBuffer is a strings.Builder safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// followAgentLogs follows every agent's log (kubectl logs -f) until ctx
// ends or the agents are gone.
func followAgentLogs(t *testing.T, ctx context.Context) *syncBuffer {
	t.Helper()
	out := &syncBuffer{}
	cmd := c.KubectlCommand(ctx, "-n", agentNS, "logs", "-f", "--prefix", "--tail=5", "--max-log-requests=10",
		"-l", "app.kubernetes.io/name=podwire-agent")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
	time.Sleep(time.Second) // the streams open
	return out
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

// nodeClean checks that node n holds nothing of podwire: no conflist
// naming it, no binary, nothing in stateDir, no nftables table of
// podwire's. stateDir itself may stay, empty, when the agent cleaned the
// node: its container has /run/podwire as a mount (a hostPath volume), which
// it can empty but not remove.
func nodeClean(t *testing.T, ctx context.Context, n *cluster.Node) {
	t.Helper()
	for _, f := range conflistsNaming(t, n, `"podwire"`) {
		t.Errorf("%s: %s still names podwire after the uninstall", n.Name, f)
	}
	if _, err := os.Stat(n.Path("/opt/cni/bin/podwire")); err == nil {
		t.Errorf("%s: /opt/cni/bin/podwire is still there after the uninstall", n.Name)
	}
	if ents, err := os.ReadDir(n.Path("/run/podwire")); err == nil && len(ents) > 0 {
		var left []string
		for _, e := range ents {
			left = append(left, e.Name())
		}
		t.Errorf("%s: /run/podwire still holds %v after the uninstall", n.Name, left)
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

// waitNoAttachments waits until node n's stateDir holds no attachment
// record (every pod podwire wired there has had its DEL).
func waitNoAttachments(t *testing.T, ctx context.Context, n *cluster.Node) {
	t.Helper()
	for {
		ents, _ := os.ReadDir(n.Path("/run/podwire"))
		var recs []string
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".json") && strings.Contains(e.Name(), "_") {
				recs = append(recs, e.Name())
			}
		}
		if len(recs) == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: attachments still recorded (their pods' DELs not run): %v", n.Name, recs)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitSandboxGone waits until p's node has removed p's sandbox: the
// runtime has run the CNI DELs by then (the API drops the pod object
// before that). The removal is the test's, as the kubelet's container GC
// would do it, once a minute (cluster.CollectSandboxes).
func waitSandboxGone(t *testing.T, ctx context.Context, p *pod) {
	t.Helper()
	if err := p.node.CollectSandboxes(ctx, p.uid); err != nil {
		t.Fatal(err)
	}
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
