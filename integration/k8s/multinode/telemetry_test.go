package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// metricsPort is the chart's default metrics.port, on every node's
// addresses (host network).
const metricsPort = 9178

// scrape is one /metrics page of a node's agent, parsed.
type scrape map[string]*dto.MetricFamily

// scrapeNode GETs n's agent's /metrics from the outside network, as a
// Prometheus beside the cluster would.
func scrapeNode(n *cluster.Node) (scrape, error) {
	url := "http://" + netip.AddrPortFrom(n.IP, metricsPort).String() + "/metrics"
	resp, err := cluster.HTTPClientIn(c.OutsideNetNS).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

func mustScrape(t *testing.T, n *cluster.Node) scrape {
	t.Helper()
	s, err := scrapeNode(n)
	if err != nil {
		t.Fatalf("%s: %v", n.Name, err)
	}
	return s
}

// sum is the sum of the values of name's series whose labels include
// want (a counter's, a gauge's or an untyped value).
func (s scrape) sum(name string, want map[string]string) float64 {
	f := s[name]
	if f == nil {
		return 0
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Untyped != nil:
			total += m.Untyped.GetValue()
		}
	}
	return total
}

// label is the value of label key of name's first series ("" if none).
func (s scrape) label(name, key string) string {
	if f := s[name]; f != nil && len(f.GetMetric()) > 0 {
		for _, l := range f.GetMetric()[0].GetLabel() {
			if l.GetName() == key {
				return l.GetValue()
			}
		}
	}
	return ""
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// waitMetric scrapes n until cond holds of the page, for up to timeout
// (the agent reads the nftables counters and records once per drift tick,
// 3 s), and returns the last page. A failed scrape is retried: during a
// surge the new agent binds the port only when the old one has stopped.
func waitMetric(t *testing.T, n *cluster.Node, timeout time.Duration, what string, cond func(scrape) bool) scrape {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, err := scrapeNode(n)
		if err == nil && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s: not seen on /metrics within %v (last scrape: %v)", n.Name, what, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestAgentMetrics scrapes every node's agent after the scenarios, as
// Prometheus would from outside the nodes, and checks that the counters
// move with what happens on the node: the build's version; a pod lookup
// on the socket per ADD; the drops of a pod that forges sources (sent by
// the test, counted by the kernel's per-element counters); a table
// deleted behind the agent's back, repaired and counted; a pod refused by
// a gate, counted by reason.
func TestAgentMetrics(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	for _, n := range c.Nodes {
		s := mustScrape(t, n)
		v := s.label("podwire_agent_build_info", "version")
		if v == "" || !strings.HasSuffix(podwireRef, ":"+v) {
			t.Errorf("%s: podwire_agent_build_info version %q, want the tag of %s", n.Name, v, podwireRef)
		}
	}
	before := mustScrape(t, n2)
	lookups := func(s scrape) float64 {
		return s.sum("podwire_agent_socket_requests_total", map[string]string{"op": "pod"})
	}

	receiver := runPod(t, "default", "metrics-receiver", n1, nil)
	forger := runPod(t, "default", "metrics-forger", n2, nil)
	after := mustScrape(t, n2)
	if lookups(after) <= lookups(before) {
		t.Errorf("%s: pod lookups on the socket %v -> %v after an ADD, want more", n2.Name, lookups(before), lookups(after))
	}

	const forged = 7
	to := netip.AddrPortFrom(receiver.ip4, 7401)
	if err := packets.SendFrom(forger.netns, netip.MustParseAddr("203.0.113.77"), to, "forged", forged); err != nil {
		t.Fatal(err)
	}
	podDrops := map[string]string{"namespace": "default", "pod": "metrics-forger"}
	s := waitMetric(t, n2, 15*time.Second, fmt.Sprintf("%d drops of metrics-forger", forged), func(s scrape) bool {
		return s.sum("podwire_pod_dropped_packets_total", podDrops) >= forged
	})
	t.Logf("%s: metrics-forger dropped %v packets (%v bytes); pods wired %v, checked %v",
		n2.Name, s.sum("podwire_pod_dropped_packets_total", podDrops), s.sum("podwire_pod_dropped_bytes_total", podDrops),
		s.sum("podwire_pods_wired", nil), s.sum("podwire_pods_checked", nil))
	if s.sum("podwire_pods_wired", nil) < 1 || s.sum("podwire_pods_checked", nil) < 1 {
		t.Errorf("%s: pods wired %v, checked %v: want at least metrics-forger", n2.Name,
			s.sum("podwire_pods_wired", nil), s.sum("podwire_pods_checked", nil))
	}

	// A table deleted behind the agent's back: repaired within a drift
	// tick or two, and counted.
	repairs := func(s scrape) float64 { return s.sum("podwire_table_repairs_total", nil) }
	r0 := repairs(mustScrape(t, n1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := n1.Command(ctx, "nft", "delete", "table", "inet", "podwire-egress").CombinedOutput(); err != nil {
		t.Fatalf("nft delete table inet podwire-egress on %s: %v\n%s", n1.Name, err, out)
	}
	waitMetric(t, n1, 20*time.Second, "a table repair", func(s scrape) bool { return repairs(s) > r0 })
	if out, err := n1.Command(ctx, "nft", "list", "table", "inet", "podwire-egress").CombinedOutput(); err != nil {
		t.Errorf("%s: inet podwire-egress not back after the repair counted: %v\n%s", n1.Name, err, out)
	}

	// A pod that asks for forwarding in a namespace the gates do not
	// allow: the ADD is refused (the kubelet retries it), and counted.
	refusals := func(s scrape) float64 { return s.sum("podwire_refusals_total", nil) }
	f0 := refusals(mustScrape(t, n2))
	refused := "metrics-refused"
	if err := createPod(ctx, "default", refused, n2, nil, map[string]string{"podwire.io/forwarding": "true"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deletePod(context.Background(), "default", refused) })
	s = waitMetric(t, n2, 25*time.Second, "a refusal", func(s scrape) bool { return refusals(s) > f0 })
	var reasons []string
	for _, m := range s["podwire_refusals_total"].GetMetric() {
		if v := m.GetCounter().GetValue(); v > 0 {
			reasons = append(reasons, fmt.Sprintf("%s=%v", m.GetLabel()[0].GetValue(), v))
		}
	}
	t.Logf("%s: refusals by reason: %s", n2.Name, strings.Join(reasons, " "))
}

// TestAgentFootprint measures node 2's agent as its own /metrics reports
// it (process_resident_memory_bytes and process_cpu_seconds_total, the
// process collector's reading of /proc/self/stat): idle for 30 s, then
// during a churn of 2 pods a second for 30 s (each pod deleted 5 s after
// its creation); and it counts, from the apiserver's audit log, the
// agent's API requests in the churn and the plugin's pod lookups on the
// agent's socket (one per ADD). The figures are docs/benchmarks.md's
// "The agent's footprint". Only the RSS target (40 MiB) is asserted: the
// CPU figures depend on the machine and are reported, not tested.
// Opt-in (PODWIRE_K8S_FOOTPRINT=1, `make bench-k8s`): a benchmark, not a
// behaviour test; the multi-node suite's other tests run ADDs and read
// the agent's metrics.
func TestAgentFootprint(t *testing.T) {
	if os.Getenv("PODWIRE_K8S_FOOTPRINT") == "" {
		t.Skip("opt-in: PODWIRE_K8S_FOOTPRINT=1 (make bench-k8s)")
	}
	needCluster(t)
	n := c.Nodes[1]
	cpu := func(s scrape) float64 { return s.sum("process_cpu_seconds_total", nil) }
	rss := func(s scrape) float64 { return s.sum("process_resident_memory_bytes", nil) }
	lookups := func(s scrape) float64 {
		return s.sum("podwire_agent_socket_requests_total", map[string]string{"op": "pod"})
	}
	const mib = 1 << 20

	// Idle: no pod of the node changes; a scrape every 5 s for the peak
	// RSS (a scrape reads nothing of the node: the agent reads it per
	// drift tick).
	const idle = 30 * time.Second
	first := mustScrape(t, n)
	peak := rss(first)
	t0 := time.Now()
	for time.Since(t0) < idle {
		time.Sleep(5 * time.Second)
		peak = max(peak, rss(mustScrape(t, n)))
	}
	last := mustScrape(t, n)
	idleCPU := (cpu(last) - cpu(first)) / time.Since(t0).Seconds()
	idlePeak := peak

	// Churn: a pod created every 500 ms, each deleted 5 s later.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const window, every, lifetime = 30 * time.Second, 500 * time.Millisecond, 10
	first = last
	t1 := time.Now()
	tick := time.NewTicker(every)
	var created []string
	t.Cleanup(func() {
		for _, name := range created {
			_ = deletePod(context.Background(), "default", name)
		}
	})
	for i := 0; time.Since(t1) < window; i++ {
		<-tick.C
		name := fmt.Sprintf("churn-%d", i)
		if err := createPod(ctx, "default", name, n, map[string]string{"churn": "footprint"}, nil); err != nil {
			t.Fatal(err)
		}
		created = append(created, name)
		if i >= lifetime {
			if err := deletePod(ctx, "default", created[i-lifetime]); err != nil {
				t.Fatal(err)
			}
		}
		if i%10 == 0 {
			peak = max(peak, rss(mustScrape(t, n)))
		}
	}
	tick.Stop()
	for _, name := range created[max(0, len(created)-lifetime):] {
		if err := deletePod(ctx, "default", name); err != nil {
			t.Fatal(err)
		}
	}
	last = mustScrape(t, n)
	churnTook := time.Since(t1)
	churnCPU := (cpu(last) - cpu(first)) / churnTook.Seconds()
	peak = max(peak, rss(last))
	adds := lookups(last) - lookups(first)
	waitNoPods(t, ctx, "churn=footprint")
	requests := agentRequests(t, t1, time.Now())

	t.Logf("%s's agent: idle %.2f%% of a core over %v, RSS peak %.1f MiB; churn of %d pods in %v (%.1f/s created, each deleted after %v): %.2f%% of a core, RSS peak %.1f MiB, %v pod lookups (ADDs) on the socket",
		n.Name, 100*idleCPU, idle, idlePeak/mib, len(created), churnTook.Round(time.Second),
		float64(len(created))/churnTook.Seconds(), lifetime*every, 100*churnCPU, peak/mib, adds)
	t.Logf("the agent's API requests from the churn's start to the last pod's removal, from the audit log: %v", requests)
	var gets float64
	for k, v := range requests {
		if strings.HasPrefix(k, "get pods") {
			gets += float64(v)
		}
	}
	if adds > 0 {
		t.Logf("pod GETs per ADD: %.2f (a GET only when the informer had not seen the pod yet)", gets/adds)
	}
	if adds == 0 {
		t.Errorf("no pod lookup on %s's agent socket during the churn: no ADD ran", n.Name)
	}
	if peak > 40*mib {
		t.Errorf("%s's agent: RSS peak %.1f MiB, target at most 40 MiB", n.Name, peak/mib)
	}
}

// waitNoPods waits until no pod with the label selector is left in the
// default namespace.
func waitNoPods(t *testing.T, ctx context.Context, selector string) {
	t.Helper()
	for {
		b, err := c.API(ctx, "GET", "/api/v1/namespaces/default/pods?labelSelector="+selector, nil)
		if err != nil {
			t.Fatal(err)
		}
		var list struct{ Items []any }
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d pods %s still there: %v", len(list.Items), selector, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// agentRequests counts the requests of the agent's ServiceAccount that
// the apiserver completed between from and to, by "verb resource"
// (watches included: one event when a watch ends), from its audit log.
func agentRequests(t *testing.T, from, to time.Time) map[string]int {
	t.Helper()
	b, err := os.ReadFile(c.AuditLog())
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		var ev struct {
			User           struct{ Username string } `json:"user"`
			Verb           string                    `json:"verb"`
			ObjectRef      struct{ Resource string } `json:"objectRef"`
			StageTimestamp time.Time                 `json:"stageTimestamp"`
		}
		if line == "" || json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		if ev.User.Username != "system:serviceaccount:"+agentNS+":podwire-agent" ||
			ev.StageTimestamp.Before(from) || ev.StageTimestamp.After(to) {
			continue
		}
		counts[ev.Verb+" "+ev.ObjectRef.Resource]++
	}
	return counts
}
