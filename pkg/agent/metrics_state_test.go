package agent

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metadatafake "k8s.io/client-go/metadata/fake"
)

// TestMetricsAgentState: readiness, the chain and the reconcilers' failing
// state follow what /readyz and Status read: out of the chain is not
// Ready and a failing chain reconciler; once in the chain and the tables
// verified, the chain is in use and the failure is cleared while its
// count stays. (Not Ready here either way: the informers never synced.)
func TestMetricsAgentState(t *testing.T) {
	md := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	a := New(Config{Node: "n1", StateDir: t.TempDir(), Serve: Serve{MetricsAddr: "127.0.0.1:0"}}, md, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	a.setOutOfChain(errors.New("00-multus.conf delegates to a chain without podwire"))
	a.run.finish(a.run.byName[recChain], time.Now(), errors.New("podwire out of the runtime's chain"), false)
	if err := testutil.GatherAndCompare(a.m.reg, strings.NewReader(`
# HELP podwire_agent_ready 1 when the agent is Ready (its informers synced, podwire in the chain the runtime reads, the node tables verified), else 0: what /readyz answers.
# TYPE podwire_agent_ready gauge
podwire_agent_ready 0
# HELP podwire_chain_in_use 1 when podwire's entry is in the chain the runtime reads (the first file of the CNI conf dir in libcni's order, or Multus's delegate), else 0: a pod started meanwhile is not wired by podwire.
# TYPE podwire_chain_in_use gauge
podwire_chain_in_use 0
`), "podwire_agent_ready", "podwire_chain_in_use"); err != nil {
		t.Error(err)
	}
	failing := func(name string) float64 { return sample(t, a, "podwire_reconciler_failing", name) }
	failures := func(name string) float64 { return sample(t, a, "podwire_reconciler_failures_total", name) }
	if failing(recChain) != 1 || failures(recChain) != 1 || failing(recTables) != 0 {
		t.Errorf("chain failing %v (failures %v), tables failing %v: want 1 (1), 0",
			failing(recChain), failures(recChain), failing(recTables))
	}

	a.setOutOfChain(nil)
	a.st.mu.Lock()
	a.st.status.Conflist = "/etc/cni/net.d/10-flannel.conflist"
	a.st.mu.Unlock()
	a.run.finish(a.run.byName[recChain], time.Now(), nil, false)
	if v := sample(t, a, "podwire_chain_in_use", ""); v != 1 {
		t.Errorf("podwire_chain_in_use %v in the chain, want 1", v)
	}
	if failing(recChain) != 0 || failures(recChain) != 1 {
		t.Errorf("after a good pass: chain failing %v, failures %v: want 0, 1", failing(recChain), failures(recChain))
	}
	if n := testutil.CollectAndCount(&a.m.state, "podwire_reconciler_failing"); n != len(a.run.statuses())+len(a.claims.statuses()) {
		t.Errorf("%d podwire_reconciler_failing series, want one per reconciler", n)
	}
	if probs, err := testutil.GatherAndLint(a.m.reg); err != nil || len(probs) > 0 {
		t.Errorf("promlint: %v %+v", err, probs)
	}
}

// sample is the value of name's series whose reconciler label is rec (or
// its only series, rec ""), gathered from a's registry.
func sample(t *testing.T, a *Agent, name, rec string) float64 {
	t.Helper()
	fams, err := a.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if rec != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != rec) {
				continue
			}
			if m.Gauge != nil {
				return m.Gauge.GetValue()
			}
			return m.Counter.GetValue()
		}
	}
	t.Fatalf("no %s{reconciler=%q} gathered", name, rec)
	return 0
}

// TestMetricNames: the names come from the collectors, the agent's state,
// the node snapshot and the process's included, with a histogram's
// samples; none twice.
func TestMetricNames(t *testing.T) {
	names, err := MetricNames()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"podwire_agent_ready", "podwire_chain_in_use", "podwire_reconciler_failing",
		"podwire_pods_unchecked", "podwire_egress_errors", "podwire_pod_dropped_packets_total",
		"podwire_agent_socket_request_duration_seconds_bucket", "podwire_agent_build_info",
		"process_resident_memory_bytes", "go_goroutines"} {
		if !slices.Contains(names, want) {
			t.Errorf("MetricNames lacks %s: %q", want, names)
		}
	}
	if slices.Contains(names, "podwire_pods_wired_bucket") {
		t.Error("MetricNames gives a gauge histogram samples")
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("MetricNames not sorted or with duplicates: %q", names)
	}
}
