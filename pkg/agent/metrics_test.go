package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
)

// TestMetricsNodeSnapshot: the gauges count complete records by kind (an
// unchecked one by its reason), the
// drop series exist for checked pods only (named by the record), and go
// with the record; a failed read is reported and keeps what was read.
func TestMetricsNodeSnapshot(t *testing.T) {
	dir := t.TempDir()
	st := state.New(dir)
	for _, r := range []*state.Record{
		{ContainerID: "c1", IfName: "eth0", Complete: true, PodNamespace: "shop", PodName: "web", HostIfName: "veth1", SourceCheck: true},
		{ContainerID: "c2", IfName: "eth0", Complete: true, PodNamespace: "nf", PodName: "router", HostIfName: "veth2", Forwarding: true},
		{ContainerID: "c3", IfName: "eth0", Complete: false, PodNamespace: "shop", PodName: "half", HostIfName: "veth3", SourceCheck: true},
		{ContainerID: "c4", IfName: "eth0", Complete: true, HostIfName: "veth4", SourceCheck: true},
		{ContainerID: "c5", IfName: "eth0", Complete: true, PodNamespace: "shop", PodName: "mac", Unchecked: `pod interface "eth0" is a macvlan: no host interface to check its sources at`},
	} {
		r.Version = state.RecordVersion
		if err := st.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	m := newMetrics("v-test")
	drops := map[string]sourcecheck.Drops{"veth1": {Packets: 7, Bytes: 700}, "veth2": {Packets: 1}, "veth4": {}}
	if err := m.readNode(dir, func() (map[string]sourcecheck.Drops, error) { return drops, nil }); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP podwire_pod_dropped_packets_total Packets the source check dropped from a checked pod's interface (forged sources; on a bridge port also forged ARP/NA and router advertisements), from the nftables element counters; restarts at 0 when a repair re-adds the element.
# TYPE podwire_pod_dropped_packets_total counter
podwire_pod_dropped_packets_total{interface="veth1",namespace="shop",pod="web"} 7
podwire_pod_dropped_packets_total{interface="veth4",namespace="",pod="c4/eth0"} 0
# HELP podwire_pods_checked Attachments whose sources the source check verifies.
# TYPE podwire_pods_checked gauge
podwire_pods_checked 2
# HELP podwire_pods_forwarding Attachments of admitted forwarding pods (no source check).
# TYPE podwire_pods_forwarding gauge
podwire_pods_forwarding 1
# HELP podwire_pods_unchecked Attachments whose sources podwire cannot check (the record's unchecked reason: a pod interface without a host side, such as macvlan or ipvlan, or an Open vSwitch port).
# TYPE podwire_pods_unchecked gauge
podwire_pods_unchecked 1
# HELP podwire_pods_wired Attachments with a complete record in stateDir.
# TYPE podwire_pods_wired gauge
podwire_pods_wired 4
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "podwire_pod_dropped_packets_total",
		"podwire_pods_checked", "podwire_pods_forwarding", "podwire_pods_unchecked", "podwire_pods_wired"); err != nil {
		t.Error(err)
	}

	// The pod goes; the counters cannot be read.
	if err := st.Delete("c1", "eth0"); err != nil {
		t.Fatal(err)
	}
	if err := m.readNode(dir, func() (map[string]sourcecheck.Drops, error) { return nil, errors.New("no netlink") }); err == nil {
		t.Error("a failed read of the counters is not reported")
	}
	if n := testutil.CollectAndCount(m, "podwire_pod_dropped_packets_total"); n != 0 {
		t.Errorf("%d drop series after the pod went and the counters could not be read, want 0", n)
	}
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(`
# HELP podwire_node_read_errors 1 when the last read for a scrape failed to read that source (records or nftables counters), else 0.
# TYPE podwire_node_read_errors gauge
podwire_node_read_errors{source="nftables"} 1
podwire_node_read_errors{source="records"} 0
# HELP podwire_pods_wired Attachments with a complete record in stateDir.
# TYPE podwire_pods_wired gauge
podwire_pods_wired 3
`), "podwire_node_read_errors", "podwire_pods_wired"); err != nil {
		t.Error(err)
	}
}

// TestMetricsObserve: an op the agent does not know is counted as
// "unknown", never echoed into a label; a CNI error counts as an error.
func TestMetricsObserve(t *testing.T) {
	m := newMetrics("v-test")
	m.observe(agentapi.OpPod, &agentapi.Response{}, time.Millisecond)
	m.observe(agentapi.OpPod, &agentapi.Response{Code: 11}, time.Millisecond)
	m.observe("op-from-the-future", &agentapi.Response{Code: 11}, time.Millisecond)
	for _, tc := range []struct {
		op             string
		requests, errs float64
	}{{agentapi.OpPod, 2, 1}, {"unknown", 1, 1}, {agentapi.OpStatus, 0, 0}} {
		if v := testutil.ToFloat64(m.requests.WithLabelValues(tc.op)); v != tc.requests {
			t.Errorf("requests{op=%s} = %v, want %v", tc.op, v, tc.requests)
		}
		if v := testutil.ToFloat64(m.errors.WithLabelValues(tc.op)); v != tc.errs {
			t.Errorf("errors{op=%s} = %v, want %v", tc.op, v, tc.errs)
		}
	}
	if n := testutil.CollectAndCount(m.requests); n != 7 {
		t.Errorf("%d request series, want 7 (pod, status, refusal, namespace, claim, release, unknown)", n)
	}
	if probs, err := testutil.GatherAndLint(m.reg); err != nil || len(probs) > 0 {
		t.Errorf("promlint: %v %+v", err, probs)
	}
}

// TestMetricsRefusalsAndRepairs: a refusal reason or a table this build
// does not know is counted as "other", never echoed into a label; a repair
// is counted per table it rebuilt, deleted or re-added elements to.
func TestMetricsRefusalsAndRepairs(t *testing.T) {
	m := newMetrics("v-test")
	m.refused(agentapi.RefusalAllowedVLANs)
	m.refused("gate-from-the-future")
	m.refused(RefusalUIDMismatch)
	for reason, want := range map[string]float64{agentapi.RefusalAllowedVLANs: 1, agentapi.RefusalOther: 1,
		RefusalUIDMismatch: 1, agentapi.RefusalBadAnnotation: 0} {
		if v := testutil.ToFloat64(m.refusals.WithLabelValues(reason)); v != want {
			t.Errorf("refusals{reason=%s} = %v, want %v", reason, v, want)
		}
	}
	if n := testutil.CollectAndCount(m.refusals); n != len(refusalReasons) {
		t.Errorf("%d refusal series, want %d (the known reasons)", n, len(refusalReasons))
	}
	m.repaired(&cliapi.RepairResult{Repaired: true, Rebuilt: []string{"inet podwire", "inet podwire-of-the-future"},
		Deleted: []string{"ip podwire-probe-snat"}, ElementsReadded: map[string]int{"bridge podwire": 2}})
	for _, tc := range []struct {
		kind, table string
		want        float64
	}{{RepairTables, "inet podwire", 1}, {RepairTables, "other", 1}, {RepairTables, "ip podwire-probe-snat", 1},
		{RepairElements, "bridge podwire", 1}, {RepairTables, "bridge podwire", 0}, {RepairElements, "inet podwire", 0}} {
		if v := testutil.ToFloat64(m.repairs.WithLabelValues(tc.kind, tc.table)); v != tc.want {
			t.Errorf("repairs{kind=%s,table=%s} = %v, want %v", tc.kind, tc.table, v, tc.want)
		}
	}
	if n := testutil.CollectAndCount(m.repairs); n != 2*len(knownTables) {
		t.Errorf("%d repair series, want %d (kinds x known tables)", n, 2*len(knownTables))
	}
}
