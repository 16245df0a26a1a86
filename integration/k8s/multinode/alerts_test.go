package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// The chart's alerts (metrics.prometheusRule.alerts), by value key and
// alert name.
var chartAlerts = map[string]string{
	"agentNotReady": "PodwireAgentNotReady", "outOfChain": "PodwireOutOfChain",
	"reconcilerFailing": "PodwireReconcilerFailing", "tableRepairs": "PodwireTableRepairsHigh",
	"uncheckedPods": "PodwireUncheckedPods", "unknownInterfaces": "PodwireUnknownInterfaces",
	"refusedPods": "PodwirePodsRefused", "egressErrors": "PodwireEgressErrors",
	"sourceCheckDrops": "PodwireSourceCheckDrops",
}

// alertJob is the job label of the agents' series: the chart's
// metrics.prometheusRule.job, the name of its metrics Service.
const alertJob = "podwire-agent-metrics"

// alertStep is the period of the test's scrapes, and so the interval of
// promtool's input series and its evaluation interval; alertFor is every
// alert's `for` in the rules the test renders (the chart's defaults are
// minutes, which `make lint`'s promtool test evaluates on its own series).
const (
	alertStep = 5 * time.Second
	alertFor  = 20 * time.Second
)

// TestAlertsOnScrapes evaluates the chart's PrometheusRule with promtool
// on the agents' own /metrics, scraped from the outside network every
// alertStep as a Prometheus would (each page a sample of every podwire_*
// series, with instance, job and node labels, and up 1 for a scrape that
// answered). The rules are the chart's render with its default
// thresholds and windows, every `for` shortened to alertFor.
//   - Control: on the scrapes of the quiet cluster, longer than alertFor,
//     no alert fires.
//   - Then, for real: a pod on node 2 sends forged sources (dropped), a
//     pod on node 2 asks for forwarding outside the allowed namespaces
//     (refused), podwire's egress table on node 1 is deleted again and
//     again (repaired each time, above a repair a minute), node 2's Node
//     names an egress IP that is not on the node, a veth on node 2's pod
//     bridge carries no podwire record (an unknown interface), and node 2's
//     runtime reads a Multus file whose delegate lacks podwire (out of the
//     chain: the agent not Ready, its chain reconciler failing). On the
//     scrapes up to then, held for longer than alertFor, exactly the
//     alerts of those conditions fire, on the node and with the labels
//     (pod, reason, reconciler) of each.
//
// PodwireUncheckedPods is not caused here: the suite's primary (flannel)
// gives every pod a host veth podwire checks. TestMultus causes it (podwire
// chained after a macvlan); here it is part of the control.
func TestAlertsOnScrapes(t *testing.T) {
	needCluster(t)
	promtool := os.Getenv("PODWIRE_PROMTOOL")
	if promtool == "" {
		t.Skip("PODWIRE_PROMTOOL unset: make test-k8s builds promtool (scripts/promtool-build.sh)")
	}
	dir := t.TempDir()
	renderAlertRules(t, filepath.Join(dir, "rules.yaml"))
	n1, n2 := c.Nodes[0], c.Nodes[1]
	receiver := runPod(t, "default", "alerts-receiver", n1, nil)
	forger := runPod(t, "default", "alerts-forger", n2, nil)

	rec := startRecording(c.Nodes)
	defer rec.stop()
	// The quiet cluster for longer than any alert's `for`.
	rec.waitSlots(t, int(2*alertFor/alertStep)+1)
	control := rec.slots() - 1
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Forged sources from a pod of node 2, dropped by the source check.
	if err := packets.SendFrom(forger.netns, netip.MustParseAddr("203.0.113.78"), netip.AddrPortFrom(receiver.ip4, 7402), "forged", 100); err != nil {
		t.Fatal(err)
	}
	forgerDrops := map[string]string{"namespace": "default", "pod": forger.name}
	drops := waitMetric(t, n2, 15*time.Second, "100 drops of "+forger.name, func(s scrape) bool {
		return s.sum("podwire_pod_dropped_packets_total", forgerDrops) >= 100
	})
	forgerIf := seriesLabel(drops, "podwire_pod_dropped_packets_total", forgerDrops, "interface")

	// A forwarding pod outside forwarding.namespaces: refused.
	refusals := func(s scrape) float64 { return s.sum("podwire_refusals_total", nil) }
	f0 := refusals(mustScrape(t, n2))
	if err := createPod(ctx, "default", "alerts-refused", n2, nil, map[string]string{"podwire.io/forwarding": "true"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deletePod(context.Background(), "default", "alerts-refused") })
	waitMetric(t, n2, 25*time.Second, "a refusal", func(s scrape) bool { return refusals(s) > f0 })

	// Node 1's egress table deleted behind the agent, fifteen times in a
	// row: each repaired and counted, 1.5 repairs a minute over the
	// rule's 10-minute window.
	repairs := func(s scrape) float64 { return s.sum("podwire_table_repairs_total", nil) }
	for i := range 15 {
		r0 := repairs(mustScrape(t, n1))
		if out, err := n1.Command(ctx, "nft", "delete", "table", "inet", "podwire-egress").CombinedOutput(); err != nil {
			t.Fatalf("nft delete table inet podwire-egress on %s (%d): %v\n%s", n1.Name, i, err, out)
		}
		waitMetric(t, n1, 20*time.Second, "a table repair", func(s scrape) bool { return repairs(s) > r0 })
	}

	// Node 2's Node names an egress IP the node does not have (inside
	// egress.allowedCIDRs: the error is the address missing).
	annotateEgress(t, n2, "10.99.0.50")
	waitMetric(t, n2, 30*time.Second, "an egress error", func(s scrape) bool { return s.sum("podwire_egress_errors", nil) >= 1 })

	// A veth on node 2's pod bridge without a podwire record, as a pod
	// wired while podwire was out of the chain leaves one.
	ip := func(args ...string) {
		t.Helper()
		if out, err := n2.Command(ctx, "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s on %s: %v\n%s", strings.Join(args, " "), n2.Name, err, out)
		}
	}
	ip("link", "add", "pwalert0", "type", "veth", "peer", "name", "pwalert1")
	t.Cleanup(func() { _ = n2.Command(context.Background(), "ip", "link", "del", "pwalert0").Run() })
	ip("link", "set", "pwalert0", "master", "cni0", "up")
	waitMetric(t, n2, 30*time.Second, "an unknown interface", func(s scrape) bool { return s.sum("podwire_unknown_interfaces", nil) >= 1 })

	// Node 2's runtime reads Multus's file, whose delegate lacks podwire.
	outOfChain(t, n2)
	waitMetric(t, n2, 30*time.Second, "podwire out of the chain", func(s scrape) bool {
		return s["podwire_chain_in_use"] != nil && s.sum("podwire_chain_in_use", nil) == 0
	})

	// Every condition held for longer than alertFor.
	rec.waitSlots(t, rec.slots()+int(2*alertFor/alertStep)+1)
	rec.stop()
	last := rec.slots() - 1

	base := func(n *cluster.Node) map[string]string {
		return map[string]string{"instance": metricsTarget(n), "job": alertJob, "node": n.Name}
	}
	with := func(n *cluster.Node, kv ...string) map[string]string {
		l := base(n)
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		return l
	}
	want := map[string][]map[string]string{
		"PodwireAgentNotReady":     {with(n2, "severity", "critical")},
		"PodwireOutOfChain":        {with(n2, "severity", "critical")},
		"PodwireReconcilerFailing": {with(n2, "severity", "warning", "reconciler", "chain")},
		"PodwireTableRepairsHigh":  {with(n1, "severity", "warning")},
		"PodwireUnknownInterfaces": {with(n2, "severity", "warning")},
		"PodwirePodsRefused":       {with(n2, "severity", "warning", "reason", "forwarding-namespace")},
		"PodwireEgressErrors":      {with(n2, "severity", "warning")},
		"PodwireSourceCheckDrops": {with(n2, "severity", "warning", "namespace", "default", "pod", forger.name,
			"interface", forgerIf)},
	}
	testFile := filepath.Join(dir, "scrapes_test.yaml")
	b, err := rec.promtoolTest(control, last, want)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(testFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, promtool, "test", "rules", testFile).CombinedOutput()
	if err != nil {
		b, _ := os.ReadFile(testFile)
		t.Fatalf("promtool test rules on the agents' scrapes: %v\n%s\n--- the test (%d scrapes every %v) ---\n%s", err, out, last+1, alertStep, b)
	}
	t.Logf("promtool test rules on %d scrapes of each agent every %v: no alert on the quiet cluster (scrape %d), then %d alerts as caused (scrape %d)",
		last+1, alertStep, control+1, len(want), last+1)
}

// renderAlertRules renders the chart's PrometheusRule with helm, every
// `for` alertFor, and writes its rule file (the spec's groups) to path,
// without the annotations: promtool test rules compares an alert's
// annotations whole, and this test is about which alerts fire.
func renderAlertRules(t *testing.T, path string) {
	t.Helper()
	chart, err := filepath.Abs(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	// --kube-version: without a cluster helm template assumes a
	// Kubernetes older than the chart's kubeVersion.
	args := []string{"template", release, chart, "--kube-version", "1.30.0", "--show-only", "templates/32-prometheusrule.yaml",
		"--set", "metrics.enabled=true", "--set", "metrics.prometheusRule.enabled=true"}
	for _, k := range slices.Sorted(maps.Keys(chartAlerts)) {
		args = append(args, "--set", fmt.Sprintf("metrics.prometheusRule.alerts.%s.for=%v", k, alertFor))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.Helm(ctx, helmBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Spec struct {
			Groups []struct {
				Name  string           `json:"name"`
				Rules []map[string]any `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatalf("helm template of the PrometheusRule: %v\n%s", err, out)
	}
	n := 0
	for _, g := range obj.Spec.Groups {
		for _, r := range g.Rules {
			delete(r, "annotations")
			n++
		}
	}
	if n != len(chartAlerts) {
		t.Fatalf("the chart's PrometheusRule has %d rules, want its %d alerts", n, len(chartAlerts))
	}
	b, err := yaml.Marshal(obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// outOfChain makes n's runtime read Multus's 00-multus.conf, whose
// delegate is flannel's conflist without podwire (as TestStartupTaint
// does), until the test ends; then it waits until n's agent is Ready
// again.
func outOfChain(t *testing.T, n *cluster.Node) {
	t.Helper()
	delegate := conflistWithoutPodwire(t, filepath.Join(n.CNIConfDir, "10-flannel.conflist"))
	multus, _ := json.Marshal(map[string]any{"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus",
		"kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig", "delegates": []any{delegate}})
	path := filepath.Join(n.CNIConfDir, "00-multus.conf")
	if err := os.WriteFile(path, multus, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(path); err != nil {
			t.Error(err)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			s, err := scrapeNode(n)
			if err == nil && s.sum("podwire_agent_ready", nil) == 1 && !hasTaint(t, n) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: the agent not Ready, or the startup taint still there, a minute after podwire is back in the chain (%v)", n.Name, err)
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
}

// metricsTarget is the instance label of n's agent: the address the
// scrapes GET.
func metricsTarget(n *cluster.Node) string {
	return netip.AddrPortFrom(n.IP, metricsPort).String()
}

// seriesLabel is label key of name's first series in s whose labels
// include want ("" when none).
func seriesLabel(s scrape, name string, want map[string]string, key string) string {
	for _, m := range s[name].GetMetric() {
		if hasLabels(m, want) {
			for _, l := range m.GetLabel() {
				if l.GetName() == key {
					return l.GetValue()
				}
			}
		}
	}
	return ""
}

// recording scrapes every node's agent each alertStep, in the background,
// into promtool input series: one sample per series and scrape (slot), a
// missing one where a series was not on that page (or the scrape failed),
// and up{...} 1 or 0 by whether the scrape answered.
type recording struct {
	mu     sync.Mutex
	series map[string][]*float64 // by promtool series notation
	n      int                   // slots recorded
	done   chan struct{}
	ended  sync.WaitGroup
}

func startRecording(nodes []*cluster.Node) *recording {
	r := &recording{series: map[string][]*float64{}, done: make(chan struct{})}
	r.ended.Add(1)
	go func() {
		defer r.ended.Done()
		tick := time.NewTicker(alertStep)
		defer tick.Stop()
		for {
			r.record(nodes)
			select {
			case <-r.done:
				return
			case <-tick.C:
			}
		}
	}()
	return r
}

// record adds one slot: a scrape of every node.
func (r *recording) record(nodes []*cluster.Node) {
	samples := map[string]float64{}
	for _, n := range nodes {
		target := map[string]string{"instance": metricsTarget(n), "job": alertJob, "node": n.Name}
		s, err := scrapeNode(n)
		up := 0.0
		if err == nil {
			up = 1
		}
		samples[seriesNotation("up", target, nil)] = up
		for name, f := range s {
			if !strings.HasPrefix(name, "podwire_") {
				continue
			}
			for _, m := range f.GetMetric() {
				var v float64
				switch {
				case m.Counter != nil:
					v = m.Counter.GetValue()
				case m.Gauge != nil:
					v = m.Gauge.GetValue()
				case m.Untyped != nil:
					v = m.Untyped.GetValue()
				default:
					continue // a histogram: no rule reads one
				}
				samples[seriesNotation(name, target, m.GetLabel())] = v
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range samples {
		for len(r.series[k]) < r.n {
			r.series[k] = append(r.series[k], nil)
		}
		r.series[k] = append(r.series[k], &v)
	}
	r.n++
}

// seriesNotation is a series as promtool's input_series name it:
// name{label="value",...}, labels sorted.
func seriesNotation(name string, target map[string]string, labels []*dto.LabelPair) string {
	all := maps.Clone(target)
	for _, l := range labels {
		all[l.GetName()] = l.GetValue()
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(all)) {
		parts = append(parts, k+"="+strconv.Quote(all[k]))
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

func (r *recording) slots() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// waitSlots waits until n slots are recorded.
func (r *recording) waitSlots(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Duration(n+5) * alertStep * 2)
	for r.slots() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d scrapes recorded, want %d", r.slots(), n)
		}
		time.Sleep(alertStep / 5)
	}
}

// stop ends the recording (again: nothing).
func (r *recording) stop() {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	r.ended.Wait()
}

// promtoolTest is a promtool test file of the recorded series, against
// rules.yaml beside it: at slot control no alert of the chart fires; at
// slot last exactly want (alert name to each alert's labels; none for
// the others).
func (r *recording) promtoolTest(control, last int, want map[string][]map[string]string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	type expAlert struct {
		ExpLabels map[string]string `json:"exp_labels"`
	}
	type ruleTest struct {
		EvalTime  string     `json:"eval_time"`
		Alertname string     `json:"alertname"`
		ExpAlerts []expAlert `json:"exp_alerts"`
	}
	type inputSeries struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	var input []inputSeries
	for _, k := range slices.Sorted(maps.Keys(r.series)) {
		var vals []string
		for i := range r.n {
			if i >= len(r.series[k]) || r.series[k][i] == nil {
				vals = append(vals, "_")
				continue
			}
			vals = append(vals, strconv.FormatFloat(*r.series[k][i], 'g', -1, 64))
		}
		input = append(input, inputSeries{Series: k, Values: strings.Join(vals, " ")})
	}
	at := func(slot int) string { return (time.Duration(slot) * alertStep).String() }
	var tests []ruleTest
	for _, name := range slices.Sorted(maps.Values(chartAlerts)) {
		tests = append(tests, ruleTest{EvalTime: at(control), Alertname: name, ExpAlerts: []expAlert{}})
		exp := []expAlert{}
		for _, l := range want[name] {
			exp = append(exp, expAlert{ExpLabels: l})
		}
		tests = append(tests, ruleTest{EvalTime: at(last), Alertname: name, ExpAlerts: exp})
	}
	return yaml.Marshal(map[string]any{
		"rule_files":          []string{"rules.yaml"},
		"evaluation_interval": alertStep.String(),
		"tests": []any{map[string]any{
			"name": "the agents' scrapes", "interval": alertStep.String(),
			"input_series": input, "alert_rule_test": tests,
		}},
	})
}
