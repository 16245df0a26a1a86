package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/ruleset"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
)

// The agent's metrics (docs/operations.md, "Metrics"), served on /metrics of
// Config.MetricsAddr. Events of the agent (repairs, restores, socket
// requests) are counters it bumps; what is on the node (records, drop
// counters) is read when a scrape asks into a nodeSnapshot, by the
// metrics reconciler on the runner's goroutine: that goroutine is in the
// node's netns (the DaemonSet's hostNetwork, or the test's node netns),
// where an HTTP handler's goroutine may not be. An unscraped agent reads
// nothing.
//
// Label cardinality is bounded: op, kind, mode and reason by the code's
// constants (a value another build sends that this one does not know is
// counted as "unknown" or agentapi.RefusalOther, never echoed), table by
// the tables podwire may own (ruleset.Known), reconciler by the agent's
// reconcilers (metrics_state.go), and pod labels only on the per-pod drop
// counters: two series per checked attachment of the node (so at most
// twice the kubelet's maxPods per interface a pod has), emitted from the
// last snapshot, so that they vanish with the pod's record.
type metrics struct {
	reg      *prometheus.Registry
	repairs  *prometheus.CounterVec
	restores *prometheus.CounterVec
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	refusals *prometheus.CounterVec
	unknown  prometheus.Gauge
	egress   prometheus.Gauge
	// state emits the agent's state; its agent is set by New.
	state stateCollector
	// collectors are what reg serves (MetricNames describes them).
	collectors []prometheus.Collector

	mu   sync.Mutex
	node nodeSnapshot
}

// nodeSnapshot is what the metrics reconciler last read of the node.
type nodeSnapshot struct {
	read                       bool
	wired, checked, forwarding int
	unchecked                  int
	drops                      []podDrops
	recordsErr, dropsErr       bool
}

// podDrops is one checked attachment's drop counters.
type podDrops struct {
	namespace, pod, iface string
	drops                 cliapi.Drops
}

// Kinds of podwire_table_repairs_total.
const (
	RepairTables   = "tables"
	RepairElements = "elements"
)

// Refusal reasons of podwire_refusals_total: the agent's answers to the
// plugin's pod lookups (Pods.Annotations) that refuse the ADD. The
// plugin's own refusals (its gates) come with agentapi.OpRefusal, by the
// reasons of agentapi.RefusalReasons.
const (
	RefusalBadRequest  = "bad-request"  // no namespace or name
	RefusalUIDMismatch = "uid-mismatch" // K8S_POD_UID is not the pod's
	RefusalNotFound    = "not-found"    // the API says there is no such pod
	RefusalAPI         = "api-error"    // the API did not answer, or refused the agent
)

var (
	descWired = prometheus.NewDesc("podwire_pods_wired",
		"Attachments with a complete record in stateDir.", nil, nil)
	descChecked = prometheus.NewDesc("podwire_pods_checked",
		"Attachments whose sources the source check verifies.", nil, nil)
	descForwarding = prometheus.NewDesc("podwire_pods_forwarding",
		"Attachments of admitted forwarding pods (no source check).", nil, nil)
	descUnchecked = prometheus.NewDesc("podwire_pods_unchecked",
		"Attachments whose sources podwire cannot check (the record's unchecked reason: a pod interface without a host side, such as macvlan or ipvlan, or an Open vSwitch port).", nil, nil)
	descDropPackets = prometheus.NewDesc("podwire_pod_dropped_packets_total",
		"Packets the source check dropped from a checked pod's interface (forged sources; on a bridge port also forged ARP/NA and router advertisements), from the nftables element counters; restarts at 0 when a repair re-adds the element.",
		[]string{"namespace", "pod", "interface"}, nil)
	descDropBytes = prometheus.NewDesc("podwire_pod_dropped_bytes_total",
		"Bytes of the packets counted by podwire_pod_dropped_packets_total.",
		[]string{"namespace", "pod", "interface"}, nil)
	descReadErrors = prometheus.NewDesc("podwire_node_read_errors",
		"1 when the last read for a scrape failed to read that source (records or nftables counters), else 0.",
		[]string{"source"}, nil)
)

func newMetrics(version string) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		repairs: counterVec("podwire_table_repairs_total",
			"Repairs of podwire's nftables by the agent, by table (\"inet podwire\") and kind: tables (missing or drifted, rebuilt; or obsolete, deleted) or elements (pods' set elements missing, re-added).",
			"kind", "table"),
		restores: counterVec("podwire_conflist_restores_total",
			"Restores of podwire's entry in the node's CNI chain after a primary's installer rewrote it, by mode (edit, derive).",
			"mode"),
		requests: counterVec("podwire_agent_socket_requests_total",
			"Requests of the plugin on the agent's unix socket, by op.",
			"op"),
		errors: counterVec("podwire_agent_socket_errors_total",
			"Requests on the agent's unix socket answered with a CNI error code, by op.",
			"op"),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "podwire_agent_socket_request_duration_seconds",
			Help: "Time the agent took to answer a request on its unix socket, by op.",
			// A cached answer takes microseconds, a GET on a miss up to
			// the API's timeout: 100 us to 10 s.
			Buckets: prometheus.ExponentialBucketsRange(0.0001, 10, 11),
		}, []string{"op"}),
		refusals: counterVec("podwire_refusals_total",
			"ADDs refused, by reason: the plugin's gates, which it reports to the agent (forwarding-namespace, routable-prefixes, allowed-vlans, bad-annotation, ...), and the agent's refusals of the plugin's pod lookups (bad-request, uid-mismatch, not-found, api-error).",
			"reason"),
		unknown: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "podwire_unknown_interfaces",
			Help: "The node's pod interfaces without a podwire record at the last repair: pods wired while podwire was out of the runtime's chain (unknownInterfaces report or drop).",
		}),
		egress: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "podwire_egress_errors",
			Help: "The node tables' errors at the last repair: an egress IP of the Node annotation outside egress.allowedCIDRs, or an egress IP not assigned on the node (each also a PodwireEgressError Event on the Node).",
		}),
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "podwire_agent_build_info", Help: "1, labelled with the agent's version and agent protocol.",
		ConstLabels: prometheus.Labels{"version": version, "protocol": fmt.Sprint(agentapi.Proto)},
	})
	build.Set(1)
	m.collectors = []prometheus.Collector{m.repairs, m.restores, m.requests, m.errors, m.latency, m.refusals, m.unknown, m.egress, build, m, &m.state,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	m.reg.MustRegister(m.collectors...)
	// Zero series from the start, so a rate() has a base before the
	// first event.
	for _, op := range ops {
		m.requests.WithLabelValues(op)
		m.errors.WithLabelValues(op)
	}
	for _, k := range []string{RepairTables, RepairElements} {
		for _, t := range knownTables {
			m.repairs.WithLabelValues(k, t)
		}
	}
	m.restores.WithLabelValues(ModeEdit)
	m.restores.WithLabelValues(ModeDerive)
	for _, r := range refusalReasons {
		m.refusals.WithLabelValues(r)
	}
	return m
}

// counterVec is a counter named name, with help and one series per value
// of labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// ops are the socket ops counted by name; any other is "unknown".
var ops = []string{agentapi.OpPod, agentapi.OpStatus, agentapi.OpRefusal, agentapi.OpNamespace, agentapi.OpClaim, agentapi.OpRelease}

// refusalReasons are the values of podwire_refusals_total's reason: the
// agent's own and the plugin's.
var refusalReasons = append([]string{RefusalBadRequest, RefusalUIDMismatch, RefusalNotFound, RefusalAPI},
	agentapi.RefusalReasons...)

// knownTables are the values of podwire_table_repairs_total's table
// (ruleset.Known, as nft(8) names them), and "other" for a table of another
// build's plugin.
var knownTables = func() []string {
	var out []string
	for _, id := range ruleset.Known() {
		out = append(out, id.String())
	}
	return append(out, "other")
}()

// refused counts one refusal and returns the reason it was counted under:
// a reason this build does not know (a newer plugin's gate) is counted as
// agentapi.RefusalOther.
func (m *metrics) refused(reason string) string {
	if !slices.Contains(refusalReasons, reason) {
		reason = agentapi.RefusalOther
	}
	m.refusals.WithLabelValues(reason).Inc()
	return reason
}

// repaired counts what one `podwire repair` rebuilt, deleted and re-added,
// by table.
func (m *metrics) repaired(res *cliapi.RepairResult) {
	table := func(t string) string {
		if !slices.Contains(knownTables, t) {
			return "other"
		}
		return t
	}
	for _, t := range append(slices.Clone(res.Rebuilt), res.Deleted...) {
		m.repairs.WithLabelValues(RepairTables, table(t)).Inc()
	}
	for t, n := range res.ElementsReadded {
		if n > 0 {
			m.repairs.WithLabelValues(RepairElements, table(t)).Inc()
		}
	}
}

// Describe is the node collector's half of prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWired, descChecked, descForwarding, descUnchecked, descDropPackets, descDropBytes, descReadErrors} {
		ch <- d
	}
}

// Collect emits the last node snapshot.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	s := m.node
	m.mu.Unlock()
	if !s.read {
		return
	}
	ch <- prometheus.MustNewConstMetric(descWired, prometheus.GaugeValue, float64(s.wired))
	ch <- prometheus.MustNewConstMetric(descChecked, prometheus.GaugeValue, float64(s.checked))
	ch <- prometheus.MustNewConstMetric(descForwarding, prometheus.GaugeValue, float64(s.forwarding))
	ch <- prometheus.MustNewConstMetric(descUnchecked, prometheus.GaugeValue, float64(s.unchecked))
	for _, d := range s.drops {
		ch <- prometheus.MustNewConstMetric(descDropPackets, prometheus.CounterValue, float64(d.drops.Packets), d.namespace, d.pod, d.iface)
		ch <- prometheus.MustNewConstMetric(descDropBytes, prometheus.CounterValue, float64(d.drops.Bytes), d.namespace, d.pod, d.iface)
	}
	ch <- prometheus.MustNewConstMetric(descReadErrors, prometheus.GaugeValue, b2f(s.recordsErr), "records")
	ch <- prometheus.MustNewConstMetric(descReadErrors, prometheus.GaugeValue, b2f(s.dropsErr), "nftables")
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// scrapeRead bounds the wait of a scrape for the node's figures: a pass
// of another reconciler (a repair) may be under way; then the scrape gets
// the last figures read.
const scrapeRead = 2 * time.Second

// reconcileMetrics reads the records and the drop counters for /metrics, on
// the runner's goroutine (the node's netns); what it could not read stays
// out of the figures.
//
// Triggers: a scrape of /metrics. No backstop: an unscraped agent reads
// nothing.
func (a *Agent) reconcileMetrics(context.Context) error {
	return a.m.readNode(a.cfg.StateDir, func() (map[string]sourcecheck.Drops, error) {
		// A one-shot connection: each request opens its socket in
		// the calling thread's netns.
		c, err := nftables.New()
		if err != nil {
			return nil, err
		}
		return sourcecheck.ReadDrops(c)
	})
}

// readNode reads the records of stateDir and the drop counters of the
// source check (through r, in the calling thread's netns) into the
// snapshot. It returns the first error; what it could read is kept.
func (m *metrics) readNode(stateDir string, r func() (map[string]sourcecheck.Drops, error)) error {
	recs, recErr := state.New(stateDir).List()
	drops, dropErr := r()
	s := nodeSnapshot{read: true, recordsErr: recErr != nil, dropsErr: dropErr != nil}
	for _, rec := range recs {
		if !rec.Complete {
			continue
		}
		s.wired++
		if rec.SourceCheck {
			s.checked++
		}
		if rec.Forwarding {
			s.forwarding++
		}
		if rec.Unchecked != "" {
			s.unchecked++
		}
		if d := cliapi.AttachmentDrops(rec, drops); d != nil {
			ns, name := rec.PodNamespace, rec.PodName
			if name == "" {
				name = rec.Key() // a runtime that sent no pod name
			}
			s.drops = append(s.drops, podDrops{namespace: ns, pod: name, iface: rec.HostIfName, drops: *d})
		}
	}
	m.mu.Lock()
	m.node = s
	m.mu.Unlock()
	return errors.Join(recErr, dropErr)
}

// observe counts one socket request and its answer.
func (m *metrics) observe(op string, resp *agentapi.Response, took time.Duration) {
	if !slices.Contains(ops, op) {
		op = "unknown" // a newer plugin's op: bounded, not echoed
	}
	m.requests.WithLabelValues(op).Inc()
	m.latency.WithLabelValues(op).Observe(took.Seconds())
	if resp != nil && resp.Code != 0 {
		m.errors.WithLabelValues(op).Inc()
	}
}

// serve serves /metrics on addr until ctx ends; before each scrape, read
// brings the node's figures up to date (bounded by scrapeRead).
func (m *metrics) serve(ctx context.Context, addr string, log *slog.Logger, read func(context.Context)) error {
	mux := http.NewServeMux()
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	mux.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rctx, cancel := context.WithTimeout(r.Context(), scrapeRead)
		read(rctx)
		cancel()
		h.ServeHTTP(w, r)
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return serveWhenFree(ctx, addr, "/metrics", srv, log)
}
