package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/internal/testns"
	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/state"
)

// TestCLIStatus runs `podwire status` in a throwaway node netns with one
// recorded pod and a config whose uplink and egress IP are missing, with
// rp_filter on: all three must be reported, and the pod listed.
func TestCLIStatus(t *testing.T) {
	node := testns.New(t)
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	rec := &state.Record{ContainerID: "0123456789abcdef", IfName: "eth0", PodNamespace: "nf-a", PodName: "router",
		Complete: true, Forwarding: true, Addresses: []netip.Addr{netip.MustParseAddr("10.199.0.5")}}
	if err := state.New(stateDir).Put(rec); err != nil {
		t.Fatal(err)
	}
	conflist := filepath.Join(dir, "net.conflist")
	if err := os.WriteFile(conflist, []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},
		{"type":"podwire","stateDir":"`+stateDir+`","uplink":"nope0","egress":{"ips":["203.0.113.10"]},
		"forwarding":{"namespaces":["nf-*"]}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := node.Do(func(ns.NetNS) error {
		return os.WriteFile("/proc/sys/net/ipv4/conf/all/rp_filter", []byte("1"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	st := statusJSON(t, node, conflist)
	if len(st.Attachments) != 1 || st.Attachments[0].Pod != "nf-a/router" || !st.Attachments[0].Forwarding {
		t.Errorf("attachments: %+v", st.Attachments)
	}
	if st.Uplink == nil || st.Uplink.Present {
		t.Errorf("uplink: %+v, want reported absent", st.Uplink)
	}
	if len(st.Tables) == 0 {
		t.Errorf("no tables listed")
	}
	for _, tb := range st.Tables {
		if tb.Present || tb.Current || !tb.Wanted {
			t.Errorf("table %+v: want wanted and missing in a fresh netns", tb)
		}
	}
	all := strings.Join(st.Warnings, "\n")
	for _, want := range []string{"rp_filter is 1", `uplink "nope0" missing`, "egress IP 203.0.113.10 is not assigned", "is missing"} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}

	// The human form lists the pod and the warnings too.
	var code int
	var out, errOut string
	_ = node.Do(func(ns.NetNS) error {
		code, out, errOut = runCLIArgs("status", "--conflist", conflist)
		return nil
	})
	if code != 0 || !strings.Contains(out, "nf-a/router") || !strings.Contains(out, "forwarding") || !strings.Contains(out, "! net.ipv4.conf.all.rp_filter") {
		t.Errorf("status text (code %d, %s):\n%s", code, errOut, out)
	}
}

func TestCLIStatusNoEntry(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "10-ptp.conflist"), []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLIArgs("status", "--conflist", filepath.Join(dir, "missing.conflist"))
	if code != 1 || !strings.Contains(errOut, "missing.conflist") {
		t.Errorf("missing conflist: code %d, stderr %q", code, errOut)
	}
	code, _, errOut = runCLIArgs("status", "bogus")
	if code != 2 || !strings.Contains(errOut, "usage") {
		t.Errorf("bad args: code %d, stderr %q", code, errOut)
	}
}

// TestCLIStatusUnchecked: a pod whose primary gave it no host interface
// (indexed by its ADD) and a chain whose primary is Cilium are both named in
// `podwire status` and, for the pod, in STATUS's warnings (readHealth); the
// index goes with the pod's DEL.
func TestCLIStatusUnchecked(t *testing.T) {
	node := testns.New(t)
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	store := state.New(stateDir)
	rec := &state.Record{ContainerID: "0123456789abcdef", IfName: "eth0", PodNamespace: "default", PodName: "mv",
		Complete: true, Unchecked: `pod interface "eth0" is a macvlan: no host interface to check its sources at`}
	if err := store.Put(rec); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkUnchecked(rec); err != nil {
		t.Fatal(err)
	}
	conflist := filepath.Join(dir, "05-cilium.conflist")
	if err := os.WriteFile(conflist, []byte(`{"cniVersion":"0.3.1","name":"cilium","plugins":[{"type":"cilium-cni"},
		{"type":"podwire","stateDir":"`+stateDir+`"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	st := statusJSON(t, node, conflist)
	all := strings.Join(st.Warnings, "\n")
	for _, want := range []string{"source addresses not checked: default/mv", "macvlan", "primary is Cilium"} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
	if len(st.Attachments) != 1 || st.Attachments[0].Unchecked == "" {
		t.Errorf("attachments: %+v", st.Attachments)
	}
	if err := store.ClearUnchecked(rec); err != nil {
		t.Fatal(err)
	}
	if ws := uncheckedWarnings(stateDir); len(ws) != 0 {
		t.Errorf("after the pod's DEL: %v", ws)
	}
}

// statusJSON runs `podwire status --conflist conflist --json` in node and
// decodes what it prints; a non-zero exit fails t.
func statusJSON(t *testing.T, node ns.NetNS, conflist string) *nodeStatus {
	t.Helper()
	var code int
	var out, errOut string
	if err := node.Do(func(ns.NetNS) error {
		code, out, errOut = runCLIArgs("status", "--conflist", conflist, "--json")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("status exited %d: %s", code, errOut)
	}
	var st nodeStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return &st
}

// TestStatusPrintsRevoked: `podwire status` names the attachments the
// agent found no longer admitted by the gates.
func TestStatusPrintsRevoked(t *testing.T) {
	line := "nf-a/router (c0/eth0): annotation podwire.io/forwarding \"true\" refused by forwarding.namespaces and forwarding.namespaceSelector"
	st := &nodeStatus{cliapi.NodeStatus{StateDir: "/run/podwire", Agent: &agentapi.Status{Node: "n1", Revoked: []string{line}}}}
	var b strings.Builder
	st.print(&b)
	if !strings.Contains(b.String(), "REVOKED gate, still wired: "+line) {
		t.Errorf("podwire status printed:\n%s\nwant the revoked attachment named", b.String())
	}
}

// TestStatusPrintsReconcilers: `podwire status` prints one line per agent
// reconciler, and a failing one's error with how long it has failed.
func TestStatusPrintsReconcilers(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	rs := []agentapi.ReconcilerStatus{
		{Name: "chain", Runs: 40, LastRun: now.Add(-2 * time.Second), LastSuccess: now.Add(-2 * time.Second), Took: 800 * time.Microsecond},
		{Name: "node tables", Runs: 7, Failures: 3, LastRun: now.Add(-time.Second), LastSuccess: now.Add(-time.Minute),
			LastError: "netlink receive: operation not permitted", ErrorSince: now.Add(-10 * time.Second)},
		{Name: "metrics"},
	}
	var b strings.Builder
	printReconcilers(&b, rs, now)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("printed:\n%s\nwant a heading and one line per reconciler", b.String())
	}
	for i, want := range []string{
		"chain              40 passes, 0 failed; last 2s ago (took 800µs), last success 2s ago",
		"node tables        7 passes, 3 failed; last 1s ago (took 0s), last success 1m0s ago; FAILING since 10s ago: netlink receive: operation not permitted",
		"metrics            0 passes, 0 failed; last never (took 0s), last success never",
	} {
		if got := strings.TrimSpace(lines[i+1]); got != want {
			t.Errorf("line %d: %q, want %q", i+1, got, want)
		}
	}
}
