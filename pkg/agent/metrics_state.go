package agent

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The agent's own state on /metrics, read at each scrape from what Status
// and /readyz read: whether it is Ready, whether podwire is in the chain
// the runtime reads, and each reconciler's failing state and failed
// passes. The alerts of the chart's PrometheusRule are on these
// (docs/operations.md, "Alerts"). The reconciler label takes the names of
// the agent's reconcilers (recChain, ...): a dozen values, fixed by this
// build.
var (
	descReady = prometheus.NewDesc("podwire_agent_ready",
		"1 when the agent is Ready (its informers synced, podwire in the chain the runtime reads, the node tables verified), else 0: what /readyz answers.",
		nil, nil)
	descInChain = prometheus.NewDesc("podwire_chain_in_use",
		"1 when podwire's entry is in the chain the runtime reads (the first file of the CNI conf dir in libcni's order, or Multus's delegate), else 0: a pod started meanwhile is not wired by podwire.",
		nil, nil)
	descFailing = prometheus.NewDesc("podwire_reconciler_failing",
		"1 while the reconciler's last pass failed (retried with backoff), else 0.",
		[]string{"reconciler"}, nil)
	descFailures = prometheus.NewDesc("podwire_reconciler_failures_total",
		"Failed passes of the reconciler since the agent started.",
		[]string{"reconciler"}, nil)
)

// stateCollector emits the agent's state (above) at each scrape.
type stateCollector struct{ a *Agent }

// Describe is stateCollector's half of prometheus.Collector.
func (*stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReady, descInChain, descFailing, descFailures} {
		ch <- d
	}
}

// Collect emits the agent's readiness, the chain and the reconcilers'
// states; nothing without an agent (MetricNames' registry).
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	if a == nil {
		return
	}
	recs := append(a.run.statuses(), a.claims.statuses()...)
	a.st.mu.Lock()
	ready := a.readyLocked() == nil
	inChain := a.st.outOfChain == "" && a.st.status.Conflist != ""
	a.st.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, b2f(ready))
	ch <- prometheus.MustNewConstMetric(descInChain, prometheus.GaugeValue, b2f(inChain))
	for _, r := range recs {
		ch <- prometheus.MustNewConstMetric(descFailing, prometheus.GaugeValue, b2f(r.LastError != ""), r.Name)
		ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(r.Failures), r.Name)
	}
}

// MetricNames lists, sorted, the names of the samples the agent's /metrics
// may serve: each of its collectors' metric names, from their Describe,
// and for a histogram or a summary also the names of its samples (_bucket,
// _sum, _count), by the type a gather of a fresh registry shows. For tests
// of what queries the agent's series (the chart's dashboard and alerts).
func MetricNames() ([]string, error) {
	m := newMetrics("")
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range m.collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	var names []string
	for d := range ch {
		name, err := descName(d)
		if err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	// A histogram vector is gathered once it has a series.
	m.latency.WithLabelValues("unknown")
	fams, err := m.reg.Gather()
	if err != nil {
		return nil, err
	}
	for _, f := range fams {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names = append(names, f.GetName()+"_bucket", f.GetName()+"_sum", f.GetName()+"_count")
		case dto.MetricType_SUMMARY:
			names = append(names, f.GetName()+"_sum", f.GetName()+"_count")
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// descName is the metric name of d, from its String (client_golang keeps
// the name unexported): `Desc{fqName: "NAME", ...}`.
func descName(d *prometheus.Desc) (string, error) {
	s, ok := strings.CutPrefix(d.String(), `Desc{fqName: `)
	if !ok {
		return "", fmt.Errorf("no metric name in %s", d)
	}
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", fmt.Errorf("no metric name in %s: %w", d, err)
	}
	return strconv.Unquote(q)
}
