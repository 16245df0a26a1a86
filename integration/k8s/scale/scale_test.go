package scale

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// envInt is the integer variable name, or def when it is unset.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// figures are the bench's results, "scale-KEY: value" lines of
// PODWIRE_SCALE_OUT.
type figures struct {
	mu    sync.Mutex
	lines map[string]string
}

func (f *figures) set(key, format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lines["scale-"+key] = fmt.Sprintf(format, args...)
	fmt.Printf("scale-%s: %s\n", key, f.lines["scale-"+key])
}

func (f *figures) write(path string) error {
	keys := slices.Sorted(maps.Keys(f.lines))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, f.lines[k])
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

const mib = 1 << 20

// TestScale grows the fake fleet to each size of PODWIRE_SCALE_SIZES and
// measures the real agents at each (the package comment says what).
func TestScale(t *testing.T) {
	suite.Need(t)
	start := time.Now()
	var sizes []int
	for _, s := range strings.Split(os.Getenv("PODWIRE_SCALE_SIZES")+"", ",") {
		if s = strings.TrimSpace(s); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("PODWIRE_SCALE_SIZES: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	if len(sizes) == 0 {
		sizes = []int{1000, 2000, 5000}
	}
	perNode := envInt(t, "PODWIRE_SCALE_PODS", 30)
	// 30 per Node on the first Nodes only: on a small machine the pods of
	// thousands of Nodes (each created, then written again by kwok) would
	// outlast the bench's budget (docs/benchmarks.md gives the rate), and
	// the agents watch only their own node's pods.
	maxPods := envInt(t, "PODWIRE_SCALE_MAX_PODS", 15000)
	steady := time.Duration(envInt(t, "PODWIRE_SCALE_STEADY_S", 60)) * time.Second
	fig := &figures{lines: map[string]string{}}
	fig.set("date", "%s", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fig.set("sizes", "%s", strings.Trim(fmt.Sprint(sizes), "[]"))
	fig.set("real-nodes", "%d", len(c.Nodes))
	fig.set("steady-s", "%.0f", steady.Seconds())
	fig.set("pods-per-node", "%d", perNode)
	fig.set("max-pods", "%d", maxPods)
	defer func() {
		fig.set("duration-s", "%.0f", time.Since(start).Seconds())
		if out := os.Getenv("PODWIRE_SCALE_OUT"); out != "" {
			if err := fig.write(out); err != nil {
				t.Error(err)
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cl, err := newClients()
	if err != nil {
		t.Fatal(err)
	}
	token, err := installAgentRBAC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podsNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitServiceAccount(ctx, podsNS); err != nil {
		t.Fatal(err)
	}
	stopKwok := startKwok(t)
	defer stopKwok()
	// The routes' pool exists before the agents start, as after any
	// forwarding pod's first ADD.
	gens := map[int][]int{}
	if err := cl.writeClaims(ctx, 0, gens); err != nil {
		t.Fatal(err)
	}
	var agents []*agent
	defer func() {
		for _, a := range agents {
			a.stop()
			a.relay.ln.Close()
		}
	}()
	for _, n := range c.Nodes {
		r, err := startRelay(n)
		if err != nil {
			t.Fatal(err)
		}
		a, err := startAgent(ctx, n, token, r)
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	apiPID, err := apiserverPID()
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range agents {
		u, _ := readUsage(a.pid())
		fig.set("0-agent-rss-mib-"+agentKey(i), "%.1f", float64(u.rss)/mib)
	}

	nodes, pods := 0, 0
	for _, size := range sizes {
		key := func(k string) string { return fmt.Sprintf("%d-%s", size, k) }
		// The fleet grows to size: Nodes, their claims, their pods.
		t0 := time.Now()
		if err := cl.addNodes(ctx, nodes, size); err != nil {
			t.Fatalf("fake Nodes %d..%d: %v", nodes, size, err)
		}
		fig.set(key("nodes-create-s"), "%.1f", time.Since(t0).Seconds())
		for i := nodes; i < size; i++ {
			if publishes(i) {
				gens[i] = []int{0}
			}
		}
		if err := cl.writeClaims(ctx, size, gens); err != nil {
			t.Fatal(err)
		}
		podNodes := min(size, maxPods/max(perNode, 1))
		if perNode > 0 && podNodes > nodes {
			t1 := time.Now()
			from := min(nodes, podNodes)
			if err := cl.addPods(ctx, from, podNodes, perNode); err != nil {
				t.Fatalf("fake pods: %v", err)
			}
			pods += (podNodes - from) * perNode
			fig.set(key("pods-create-s"), "%.1f", time.Since(t1).Seconds())
		}
		nodes = size
		fig.set(key("pods"), "%d", pods)
		want := wantRoutes(size, gens)
		fig.set(key("routes"), "%d", len(want))
		if err := waitRoutes(ctx, agents, want, 3*time.Minute); err != nil {
			t.Fatalf("%d Nodes: %v", size, err)
		}
		fig.set(key("converged-s"), "%.1f", time.Since(t0).Seconds())
		if err := cl.waitReady(ctx, size, 5*time.Minute); err != nil {
			t.Fatal(err)
		}
		fig.set(key("ready-s"), "%.1f", time.Since(t0).Seconds())
		if err := waitQuiet(ctx, 2*time.Minute); err != nil {
			t.Log(err) // measured anyway, the rate of Node events says how busy
		}
		fig.set(key("quiet-s"), "%.1f", time.Since(t0).Seconds())

		// At rest: nothing changes but kwok's heartbeats.
		time.Sleep(10 * time.Second)
		before := snapshot(ctx, t, agents, apiPID)
		time.Sleep(steady)
		after := snapshot(ctx, t, agents, apiPID)
		window := after.at.Sub(before.at)
		for i := range agents {
			fig.set(key("steady-agent-cpu-pct-"+agentKey(i)), "%.3f", pct(after.agents[i].cpu-before.agents[i].cpu, window))
			fig.set(key("steady-agent-rss-mib-"+agentKey(i)), "%.1f", float64(after.agents[i].rss)/mib)
			fig.set(key("steady-agent-rx-kib-per-min-"+agentKey(i)), "%.1f", float64(after.rx[i]-before.rx[i])/1024/window.Minutes())
		}
		fig.set(key("steady-apiserver-cpu-pct"), "%.1f", pct(after.api.cpu-before.api.cpu, window))
		fig.set(key("steady-apiserver-rss-mib"), "%.0f", float64(after.api.rss)/mib)
		fig.set(key("steady-node-watch-events-per-min"), "%.0f", (after.events-before.events)/window.Minutes())
		fig.set(key("steady-node-watch-kib-per-min"), "%.1f", (after.bytes-before.bytes)/1024/window.Minutes())

		// One Node's change at a time, its claim already in the pool: the
		// time from the patch's answer to the route on every real node.
		var single []time.Duration
		for s := range 5 {
			i := (s*37 + 3) % (size / 10) * 10
			g := gens[i][len(gens[i])-1] + 1
			gens[i] = append(gens[i], g)
			if err := cl.writeClaims(ctx, size, gens); err != nil {
				t.Fatal(err)
			}
			time.Sleep(pastFloodGap)
			if err := cl.setRoute(ctx, i, g); err != nil {
				t.Fatal(err)
			}
			patched := time.Now()
			seen, err := waitPrefixes(ctx, agents, []netip.Prefix{routeOf(i, g)}, 30*time.Second)
			if err != nil {
				t.Fatalf("%d Nodes, %s's change: %v", size, fakeName(i), err)
			}
			single = append(single, seen[routeOf(i, g)].Sub(patched))
			gens[i] = []int{g}
		}
		slices.Sort(single)
		fig.set(key("single-change-p50-ms"), "%.0f", ms(single[len(single)/2]))
		fig.set(key("single-change-max-ms"), "%.0f", ms(single[len(single)-1]))

		// A tenth of the Nodes change their routes at once (every
		// publishing Node), their new claims already in the pool.
		var changed []int
		for i := range gens {
			changed = append(changed, i)
		}
		slices.Sort(changed)
		for _, i := range changed {
			gens[i] = append(gens[i], gens[i][len(gens[i])-1]+1)
		}
		if err := cl.writeClaims(ctx, size, gens); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pastFloodGap)
		before = snapshot(ctx, t, agents, apiPID)
		peaks := samplePeaks(100*time.Millisecond, pids(agents)...)
		var mu sync.Mutex
		patchedAt := map[netip.Prefix]time.Time{}
		var newRoutes []netip.Prefix
		for _, i := range changed {
			newRoutes = append(newRoutes, routeOf(i, gens[i][len(gens[i])-1]))
		}
		var seen map[netip.Prefix]time.Time
		var seenErr error
		watchDone := make(chan struct{})
		go func() {
			defer close(watchDone)
			seen, seenErr = waitPrefixes(ctx, agents, newRoutes, 2*time.Minute)
		}()
		if err := parallel(0, len(changed), 16, func(k int) error {
			i := changed[k]
			g := gens[i][len(gens[i])-1]
			if err := cl.setRoute(ctx, i, g); err != nil {
				return err
			}
			mu.Lock()
			patchedAt[routeOf(i, g)] = time.Now()
			mu.Unlock()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		<-watchDone
		if seenErr != nil {
			t.Fatalf("%d Nodes, a tenth changed: %v", size, seenErr)
		}
		time.Sleep(2 * time.Second)
		after = snapshot(ctx, t, agents, apiPID)
		peak := peaks.end()
		window = after.at.Sub(before.at)
		var lat []time.Duration
		last := before.at
		for p, at := range seen {
			lat = append(lat, at.Sub(patchedAt[p]))
			last = maxTime(last, at)
		}
		slices.Sort(lat)
		fig.set(key("churn-nodes"), "%d", len(changed))
		fig.set(key("churn-p50-ms"), "%.0f", ms(lat[len(lat)/2]))
		fig.set(key("churn-max-ms"), "%.0f", ms(lat[len(lat)-1]))
		fig.set(key("churn-all-s"), "%.1f", last.Sub(before.at).Seconds())
		fig.set(key("churn-window-s"), "%.1f", window.Seconds())
		for i, a := range agents {
			fig.set(key("churn-agent-cpu-s-"+agentKey(i)), "%.2f", (after.agents[i].cpu - before.agents[i].cpu).Seconds())
			fig.set(key("churn-agent-cpu-pct-"+agentKey(i)), "%.2f", pct(after.agents[i].cpu-before.agents[i].cpu, window))
			fig.set(key("churn-agent-rss-peak-mib-"+agentKey(i)), "%.1f", float64(peak[a.pid()])/mib)
			fig.set(key("churn-agent-rx-kib-"+agentKey(i)), "%.1f", float64(after.rx[i]-before.rx[i])/1024)
		}
		fig.set(key("churn-apiserver-cpu-s"), "%.2f", (after.api.cpu - before.api.cpu).Seconds())
		for _, i := range changed {
			gens[i] = gens[i][len(gens[i])-1:]
		}
		if err := cl.writeClaims(ctx, size, gens); err != nil {
			t.Fatal(err)
		}

		// The last real node's agent restarts: its first LIST of every
		// Node, and its RSS while it builds its cache.
		last2 := agents[len(agents)-1]
		last2.stop()
		rx0 := last2.relay.toAgent.Load()
		t2 := time.Now()
		a, err := startAgent(ctx, last2.node, token, last2.relay)
		if err != nil {
			t.Fatal(err)
		}
		agents[len(agents)-1] = a
		ready := time.Since(t2)
		pk := samplePeaks(50*time.Millisecond, a.pid())
		time.Sleep(15 * time.Second)
		restartPeak := pk.end()[a.pid()]
		fig.set(key("restart-ready-s"), "%.1f", ready.Seconds())
		fig.set(key("restart-rx-kib"), "%.0f", float64(a.relay.toAgent.Load()-rx0)/1024)
		fig.set(key("restart-rss-peak-mib"), "%.1f", float64(restartPeak)/mib)
		u, _ := readUsage(a.pid())
		fig.set(key("restart-rss-mib"), "%.1f", float64(u.rss)/mib)
	}
}

// pastFloodGap is how long a Node's change waits after its claim was
// written: the routes reconciler runs at most once per 3 s (its flood gap,
// pkg/agent floodGap), and the pool's change makes a pass that may itself
// wait out the gap of the pass before it (the previous change's), so a
// change within two gaps of the pool's would measure the gap, not the
// agent's answer to a Node after a quiet spell.
const pastFloodGap = 7 * time.Second

// agentKey names the agent of real node i in the figures: a1, a2.
func agentKey(i int) string { return fmt.Sprintf("a%d", i+1) }

func pids(agents []*agent) []int {
	var out []int
	for _, a := range agents {
		out = append(out, a.pid())
	}
	return out
}

func pct(cpu, window time.Duration) float64 { return 100 * cpu.Seconds() / window.Seconds() }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// wantRoutes is every route the real nodes should hold with the fleet at
// size: each publishing Node's prefix at its last generation.
func wantRoutes(size int, gens map[int][]int) []netip.Prefix {
	var out []netip.Prefix
	for i := 0; i < size; i++ {
		if g, ok := gens[i]; ok && publishes(i) {
			out = append(out, routeOf(i, g[len(g)-1]))
		}
	}
	return out
}

// waitRoutes waits until every agent's node holds exactly want as remote
// routes.
func waitRoutes(ctx context.Context, agents []*agent, want []netip.Prefix, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	for {
		ok := true
		var why string
		for _, a := range agents {
			have, err := a.remoteRoutes()
			if err != nil {
				return err
			}
			missing := 0
			for _, p := range want {
				if !have[p] {
					missing++
				}
			}
			if missing > 0 || len(have) != len(want) {
				ok = false
				why = fmt.Sprintf("%s holds %d remote routes, %d of the %d wanted missing", a.node.Name, len(have), missing, len(want))
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return fmt.Errorf("routes not converged within %v: %s", timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitPrefixes polls every agent's node every 20 ms until each holds every
// prefix of want, and returns when each prefix was on every node.
func waitPrefixes(ctx context.Context, agents []*agent, want []netip.Prefix, timeout time.Duration) (map[netip.Prefix]time.Time, error) {
	onAll := map[netip.Prefix]time.Time{}
	seen := make([]map[netip.Prefix]bool, len(agents))
	for i := range seen {
		seen[i] = map[netip.Prefix]bool{}
	}
	end := time.Now().Add(timeout)
	for {
		for i, a := range agents {
			have, err := a.remoteRoutes()
			if err != nil {
				return nil, err
			}
			for _, p := range want {
				if have[p] {
					seen[i][p] = true
				}
			}
		}
		now := time.Now()
		for _, p := range want {
			if _, ok := onAll[p]; ok {
				continue
			}
			all := true
			for i := range agents {
				all = all && seen[i][p]
			}
			if all {
				onAll[p] = now
			}
		}
		if len(onAll) == len(want) {
			return onAll, nil
		}
		if now.After(end) || ctx.Err() != nil {
			return nil, fmt.Errorf("%d of %d changed routes on every real node within %v", len(onAll), len(want), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sample is the measures at one instant.
type sample struct {
	at            time.Time
	agents        []usage
	rx            []int64
	api           usage
	bytes, events float64
}

func snapshot(ctx context.Context, t *testing.T, agents []*agent, apiPID int) sample {
	t.Helper()
	s := sample{at: time.Now()}
	for _, a := range agents {
		u, err := readUsage(a.pid())
		if err != nil {
			t.Fatalf("agent of %s: %v", a.node.Name, err)
		}
		s.agents = append(s.agents, u)
		s.rx = append(s.rx, a.relay.toAgent.Load())
	}
	var err error
	if s.api, err = readUsage(apiPID); err != nil {
		t.Fatal(err)
	}
	if s.bytes, s.events, err = watchEvents(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}
