package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
	"github.com/podwire/podwire/pkg/cliapi"
)

// The operator's lifecycle, last in the package (this file sorts last,
// and the uninstall is its last test): across a real version boundary to
// an earlier release and back (`helm upgrade`, `helm rollback`), then
// `helm uninstall`.

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

// podwireRelease is a release of podwire as the upgrade test installs
// it: its chart's directory, its image pinned in the run's registry, and
// the version its binaries report (the image's tag).
type podwireRelease struct {
	name, chart, pinned, version string
}

// podwireNodesCRD is the PodwireNode CRD, which the earlier release lacks.
const podwireNodesCRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podwirenodes.podwire.io"

// TestHelmUpgrade crosses a real version boundary both ways, with pods
// running and churning: the earlier release is a commit of main built
// from its own tree (`make image-previous`: its code, its mkimage, its
// chart, its version), the last before the agents stopped watching Nodes
// for PodwireNodes. Four crossings, each a rolling replacement of the
// agents node by node:
//
//  1. `helm upgrade` from the current release to the earlier one;
//  2. the upgrade: `helm upgrade` from the earlier release to the current;
//  3. the rollback: `helm rollback` to the earlier release's revision;
//  4. `helm upgrade` to the current release again, for TestHelmUninstall.
//
// During the upgrade and the rollback, a pod is created every 500 ms on
// the nodes in turn and deleted 8 s later (churn); during all four, a pod
// wired before the first sends a forged and a genuine datagram every
// 250 ms. After each:
//   - no pod was unchecked at any sample: none of the forged datagrams
//     sent during the crossing arrived, genuine ones did;
//   - every node's agent (podwire_agent_build_info) and installed plugin
//     (`podwire version`) are at the release crossed to;
//   - no record is lost: every pod wired before the crossing (two wired
//     at the start, and the pods the churn of the crossing before left
//     running) still has its record on its node, which `podwire status
//     --json` (the installed plugin's) shows complete and source-checked,
//     with the node's tables current and no unknown interface; its forged
//     datagram is dropped and its genuine one delivered;
//   - every pod the churn left running is Ready and checked;
//   - PodwireNodes as an operator meets them: the earlier chart has no
//     PodwireNode CRD, so helm deletes it (and every PodwireNode with it)
//     when going to the earlier release; going to the current one it is
//     created again and every node's agent writes its PodwireNode.
//
// At the end, once the churned pods are deleted: no sandbox creation or
// deletion of theirs failed (no FailedCreatePodSandBox, no FailedKillPod
// naming KillPodSandbox), whichever release ran their ADD and DEL.
func TestHelmUpgrade(t *testing.T) {
	needCluster(t)
	prevImage, prevRef, prevChart := os.Getenv("PODWIRE_PREVIOUS_IMAGE"), os.Getenv("PODWIRE_PREVIOUS_IMAGE_REF"), os.Getenv("PODWIRE_PREVIOUS_CHART")
	if prevImage == "" || prevRef == "" || prevChart == "" {
		t.Fatal("PODWIRE_PREVIOUS_IMAGE, PODWIRE_PREVIOUS_IMAGE_REF and PODWIRE_PREVIOUS_CHART are unset: `make test-k8s` sets them (make image-previous)")
	}
	n1, n2 := c.Nodes[0], c.Nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	prevPinned, err := c.PushArchive(ctx, prevImage, prevRef)
	if err != nil {
		t.Fatal(err)
	}
	current := podwireRelease{"the current release", chartDir, podwirePinned, tagOf(podwireRef)}
	earlier := podwireRelease{"the earlier release", prevChart, prevPinned, tagOf(prevRef)}
	if current.version == earlier.version {
		t.Fatalf("the earlier release has the current one's version %s", current.version)
	}
	t.Logf("crossing between %s %s and %s %s", current.name, current.version, earlier.name, earlier.version)

	receiver := runPod(t, "default", "upgrade-receiver", n1, nil)
	sink, to := listen(t, receiver, 7402)
	sampled := runPod(t, "default", "upgrade-sampled", n2, nil)
	// The pods wired before the next crossing: two from the start, then
	// those each crossing's churn leaves running.
	started := []*pod{sampled, runPod(t, "default", "upgrade-wired", n1, nil)}
	wired := started

	// The sampler: a forged and a genuine datagram every 250 ms from the
	// pod wired before the first crossing, tagged with the crossing.
	forged := netip.MustParseAddr("10.244.0.251")
	var stage atomic.Int32
	var samples [5]atomic.Int32
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
			i := stage.Load()
			_ = packets.SendFrom(sampled.netns, forged, to, fmt.Sprintf("sample-%d-forged", i), 1)
			_ = packets.SendFrom(sampled.netns, sampled.ip4, to, fmt.Sprintf("sample-%d-genuine", i), 1)
			samples[i].Add(1)
		}
	}()
	defer func() {
		stopSampling()
		<-sampling
	}()

	// The upgrade and the rollback run under churn; the crossings that
	// lead to them and back are checked all the same, without it, which
	// would only slow their rollouts (by about a minute each).
	var earlierRevision int
	crossings := []struct {
		name  string
		to    podwireRelease
		churn bool
		run   func() error
	}{
		{"helm upgrade to the earlier release", earlier, false, func() error { return helmChart(ctx, "upgrade", earlier.chart, earlier.pinned) }},
		{"the upgrade (helm upgrade to the current release)", current, true, func() error { return helmChart(ctx, "upgrade", current.chart, current.pinned) }},
		{"the rollback (helm rollback to the earlier release's revision)", earlier, true, func() error { return helmRollback(ctx, earlierRevision) }},
		{"helm upgrade to the current release again", current, false, func() error { return helmChart(ctx, "upgrade", current.chart, current.pinned) }},
	}
	var churns []*churn
	var previous *churn // whose pods still running are in wired
	for i, cr := range crossings {
		stage.Store(int32(i + 1))
		start := time.Now()
		var ch *churn
		if cr.churn {
			ch = startChurn(ctx, t, fmt.Sprintf("crossing%d", i+1), 500*time.Millisecond, 16)
			churns = append(churns, ch)
		}
		if err := cr.run(); err != nil {
			t.Fatalf("%s: %v", cr.name, err)
		}
		if i == 0 {
			earlierRevision = helmRevision(t, ctx)
		}
		for _, n := range c.Nodes {
			waitMetric(t, n, 60*time.Second, "the agent of version "+cr.to.version, func(s scrape) bool {
				return s.label("podwire_agent_build_info", "version") == cr.to.version
			})
			if v := pluginVersion(t, n); !strings.Contains(v, cr.to.version) {
				t.Errorf("%s: the installed plugin says %q after %s, want version %s", n.Name, v, cr.name, cr.to.version)
			}
		}
		took := time.Since(start)
		var left []*pod
		if ch != nil {
			var created int
			created, left = ch.stop(t)
			t.Logf("%s: %s on %d nodes in %v; %d pods created meanwhile (%d ticks skipped for the nodes' backlog), %d deleted",
				cr.name, cr.to.version, len(c.Nodes), took.Round(time.Second), created, ch.skipped, created-len(left))
		} else {
			t.Logf("%s: %s on %d nodes in %v", cr.name, cr.to.version, len(c.Nodes), took.Round(time.Second))
		}
		stage.Store(0) // between crossings: not counted
		sampledNow := samples[i+1].Load()

		if got := sink.From(fmt.Sprintf("sample-%d-forged", i+1)); len(got) > 0 {
			t.Errorf("%s: a datagram forged from %s by the pod wired before it reached %s", cr.name, forged, to)
		}
		if !sink.Got(sampled.ip4, fmt.Sprintf("sample-%d-genuine", i+1)) {
			t.Errorf("%s: none of the %d genuine datagrams sent meanwhile from %s reached %s", cr.name, sampledNow, sampled.ip4, to)
		}
		checkWired(t, ctx, sink, to, wired, cr.name)
		// The churn's pods still running: Ready, and checked; they are
		// pods wired before the next crossing.
		var running []*pod
		for _, p := range left {
			q, err := waitPod(ctx, p.namespace, p.name, p.node)
			if err != nil {
				t.Errorf("a pod created during %s: %v", cr.name, err)
				continue
			}
			checkedPod(t, sink, to, q, netip.MustParseAddr("203.0.113.99"), "created during "+cr.name)
			running = append(running, q)
		}
		checkPodwireNodes(t, ctx, cr.to == earlier, cr.name)
		if t.Failed() {
			t.FailNow()
		}
		t.Logf("%s: %d samples of the pod wired before the first crossing, every forged one dropped, genuine ones delivered; %d pods wired before it and %d created during it checked",
			cr.name, sampledNow, len(wired), len(running))
		// The pods of the churn before, checked across this crossing too,
		// go; this churn's stay for the next.
		if previous != nil {
			previous.deleteAll(ctx)
		}
		previous = ch
		wired = append(slices.Clip(started), running...)
	}
	for _, ch := range churns {
		ch.deleteAll(ctx)
		waitNoPods(t, ctx, "churn="+ch.prefix)
	}
	if failed := sandboxFailures(t, ctx, "crossing"); len(failed) > 0 {
		t.Errorf("%d sandbox creations or deletions failed across the crossings:\n%s", len(failed), strings.Join(failed, "\n"))
	}
}

// helmRollback runs `helm rollback` of the release to revision rev and
// waits for the DaemonSet's rollout.
func helmRollback(ctx context.Context, rev int) error {
	start := time.Now()
	if _, err := c.Helm(ctx, helmBin, "rollback", release, strconv.Itoa(rev), "--namespace", releaseNS); err != nil {
		return err
	}
	if out, err := c.RollOut(ctx, agentNS, "ds/podwire-agent", 180*time.Second); err != nil {
		return fmt.Errorf("the DaemonSet did not roll out after helm rollback: %v\n%s", err, out)
	}
	fmt.Printf("podwire: helm rollback to revision %d, agents Ready in %.1fs\n", rev, time.Since(start).Seconds())
	return nil
}

// helmRevision is the release's current revision (`helm status`).
func helmRevision(t *testing.T, ctx context.Context) int {
	t.Helper()
	out, err := c.Helm(ctx, helmBin, "status", release, "--namespace", releaseNS, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Version int }
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Version == 0 {
		t.Fatalf("helm status -o json: %v\n%s", err, out)
	}
	return st.Version
}

// checkWired checks that no record of pods was lost across a crossing:
// each pod in wired still has its record on its node, `podwire status
// --json` there (the node's installed plugin, the release crossed to)
// shows its attachment complete and source-checked, the node's tables
// current and no unknown interface, and its forged datagram is dropped
// while its genuine one is delivered.
func checkWired(t *testing.T, ctx context.Context, sink *packets.Sink, to netip.AddrPort, wired []*pod, crossing string) {
	t.Helper()
	statuses := map[*cluster.Node]map[string]cliapi.Attachment{}
	for _, n := range c.Nodes {
		r, err := cnitest.SettledStatus(20*time.Second, func() *exec.Cmd {
			return n.Command(ctx, "/opt/cni/bin/podwire", "status", "--conf-dir", "/etc/cni/net.d", "--json")
		})
		st := r.Status
		if err != nil {
			t.Errorf("%s after %s: %v:\n%s\n%s", n.Name, crossing, err, r.Output, agentDiagnostics(ctx))
		}
		statuses[n] = map[string]cliapi.Attachment{}
		if st != nil {
			for _, a := range st.Attachments {
				statuses[n][a.Pod] = a
			}
		}
	}
	forged := netip.MustParseAddr("203.0.113.98")
	for _, p := range wired {
		if !recorded(t, ctx, p) {
			t.Errorf("%s/%s on %s, wired before %s: its record is gone", p.namespace, p.name, p.node.Name, crossing)
			continue
		}
		a, ok := statuses[p.node][p.namespace+"/"+p.name]
		if !ok || !a.Complete || !a.SourceCheck || a.Unchecked != "" {
			t.Errorf("%s/%s on %s, wired before %s: podwire status shows %+v (present %v), want complete and source-checked",
				p.namespace, p.name, p.node.Name, crossing, a, ok)
		}
		// checkedPod's payloads name the pod alone: these name the
		// crossing too, so that a datagram of an earlier check does not
		// answer for this one.
		tag := p.name + " " + crossing
		if err := packets.SendFrom(p.netns, forged, to, "forged "+tag, 3); err != nil {
			t.Fatal(err)
		}
		if err := packets.SendFrom(p.netns, p.ip4, to, "genuine "+tag, 3); err != nil {
			t.Fatal(err)
		}
		if !sink.WaitGot(p.ip4, "genuine "+tag, 10*time.Second) {
			t.Errorf("%s on %s, wired before %s: its own datagrams did not arrive", p.name, p.node.Name, crossing)
		}
		if sink.Got(forged, "forged "+tag) {
			t.Errorf("%s on %s, wired before %s, is not checked: its datagram forged from %s arrived", p.name, p.node.Name, crossing, forged)
		}
	}
}

// agentDiagnostics is the agents' pods, with their restarts, and their
// logs, the previous container's too: what a failed check shows.
func agentDiagnostics(ctx context.Context) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"-n", agentNS, "get", "pods", "-o", "wide"},
		{"-n", agentNS, "logs", "-l", "app.kubernetes.io/name=podwire-agent", "--prefix", "--tail=40", "--max-log-requests=10"},
		{"-n", agentNS, "logs", "-l", "app.kubernetes.io/name=podwire-agent", "--prefix", "--tail=40", "--max-log-requests=10", "--previous"},
	} {
		out, err := c.Kubectl(ctx, "", args...)
		fmt.Fprintf(&b, "kubectl %s: %v\n%s\n", strings.Join(args, " "), err, out)
	}
	return b.String()
}

// checkPodwireNodes checks the PodwireNodes after a crossing: with the
// earlier release (earlier), which has no PodwireNode CRD, helm has
// deleted the CRD, and with it every PodwireNode; with the current one,
// the CRD is back and every node's agent has written its PodwireNode.
func checkPodwireNodes(t *testing.T, ctx context.Context, earlier bool, crossing string) {
	t.Helper()
	err := cnitest.Eventually(30*time.Second, func() error {
		_, err := c.API(ctx, "GET", podwireNodesCRD, nil)
		switch {
		case earlier && err == nil:
			return fmt.Errorf("the PodwireNode CRD is still there")
		case earlier && !strings.Contains(err.Error(), "404"):
			return err
		case earlier:
			return nil
		}
		for _, n := range c.Nodes {
			b, err := c.API(ctx, "GET", "/apis/podwire.io/v1alpha1/podwirenodes/"+n.Name, nil)
			if err != nil {
				return fmt.Errorf("no PodwireNode %s: %v", n.Name, err)
			}
			var u struct {
				Spec struct{ Fingerprint string } `json:"spec"`
			}
			if err := json.Unmarshal(b, &u); err != nil || !strings.HasPrefix(u.Spec.Fingerprint, "sha256:") {
				return fmt.Errorf("PodwireNode %s has no fingerprint: %v %s", n.Name, err, b)
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("after %s: %v", crossing, err)
	}
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
	// So does TestStartupTaint's early Deployment, made at the suite's
	// set-up, when that test did not run (go test -run) to delete it.
	kubectl(t, "", "delete", "deployment", "early", "late", "--ignore-not-found",
		"--cascade=foreground", "--wait=true", "--timeout=90s")
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
