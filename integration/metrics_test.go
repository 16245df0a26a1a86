package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podwire/podwire/integration/packets"
	"github.com/podwire/podwire/pkg/cliapi"
)

// scrape GETs the agent's /metrics over TCP inside the node netns (the
// connection is opened on a thread in that netns; the HTTP exchange then
// runs on it wherever the goroutine is) and parses the text format.
func (ta *testAgent) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	var c net.Conn
	if err := ta.nodeNS.Do(func(ns.NetNS) error {
		var err error
		c, err = net.DialTimeout("tcp", metricsAddr, 2*time.Second)
		return err
	}); err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.0\r\nHost: agent\r\nAccept: text/plain\r\n\r\n"); err != nil {
		t.Fatalf("scrape: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape: bad text format: %v", err)
	}
	return fams
}

// metricValue is the value of family name's series with exactly the
// labels want (a counter's, a gauge's or an untyped value's; a histogram's
// sample count); ok false when there is no such series.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if want[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// TestAgentMetrics: the agent's /metrics, scraped over HTTP, follows what
// real packets and real CNI ADDs did on the node: a pod that forges its
// source has its drops counted (and `podwire status` shows the same
// counters), an honest pod none; the gauges count the records; the
// socket's counters rise with the plugin's requests, the agent's refusals
// and the refusals the plugin reports by gate; each repaired table is
// counted under its name (rebuilt, or elements re-added); a deleted pod's
// series goes away.
func TestAgentMetrics(t *testing.T) {
	n := newNode(t)
	const uid = "6f1c2a52-0000-4000-8000-00000000000a"
	ta := n.startAgent(n.primaryList("0.3.1", nil), n.podwireEntry(nil), knode("worker-1", nil),
		kpod("default", "asked", uid, nil))
	confFile := filepath.Join(ta.confDir, "10-primary.conflist")
	var list *libcni.NetworkConfigList
	if err := eventually(10*time.Second, func() error {
		l, err := libcni.ConfListFromFile(confFile)
		if err == nil && (len(l.Plugins) != 2 || l.Plugins[1].Network.Type != "podwire") {
			err = fmt.Errorf("podwire not in %s", confFile)
		}
		list = l
		return err
	}); err != nil {
		t.Fatal(err)
	}

	be := n.newBackend()
	const port = 7100
	sink := newSink(t, be.ns.Path(), port)
	dst := netip.AddrPortFrom(be.v4, port)
	honest := n.mustAddPod(podSpec{version: "0.3.1", list: list, namespace: "shop", name: "honest"})
	forger := n.mustAddPod(podSpec{version: "0.3.1", list: list, namespace: "shop", name: "forger"})

	// The honest pod's own datagrams arrive (so its path is open and a
	// zero below is not an idle pod's zero); the forged ones do not.
	if err := packets.SendFrom(honest.NS.Path(), honest.v4, dst, "honest", 5); err != nil {
		t.Fatal(err)
	}
	if !sink.WaitGot(honest.v4, "honest", 3*time.Second) {
		t.Fatalf("the honest pod's datagrams from %s did not arrive", honest.v4)
	}
	forged := netip.MustParseAddr("10.99.0.5")
	const sent = 10
	if err := packets.SendFrom(forger.NS.Path(), forged, dst, "forged", sent); err != nil {
		t.Fatal(err)
	}
	if sink.WaitGot(forged, "forged", time.Second) {
		t.Fatalf("a forged source %s passed the node", forged)
	}

	pod := func(name string) map[string]string {
		if name == "forger" {
			return map[string]string{"namespace": "shop", "pod": name, "interface": forger.hostIf()}
		}
		return map[string]string{"namespace": "shop", "pod": name, "interface": honest.hostIf()}
	}
	var fams map[string]*dto.MetricFamily
	// The node's counters are read once per drift tick (1 s here).
	if err := eventually(5*time.Second, func() error {
		fams = ta.scrape(t)
		if v, _ := metricValue(fams, "podwire_pod_dropped_packets_total", pod("forger")); v < sent {
			return fmt.Errorf("forger's drops %v, want >= %d", v, sent)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if v, ok := metricValue(fams, "podwire_pod_dropped_packets_total", pod("honest")); !ok || v != 0 {
		t.Errorf("honest pod's drops: %v (series present %v), want 0", v, ok)
	}
	if v, _ := metricValue(fams, "podwire_pod_dropped_bytes_total", pod("forger")); v < sent*float64(len("forged")+28) {
		t.Errorf("forger's dropped bytes %v, want at least %d datagrams' worth", v, sent)
	}
	for name, want := range map[string]float64{"podwire_pods_wired": 2, "podwire_pods_checked": 2, "podwire_pods_forwarding": 0} {
		if v, ok := metricValue(fams, name, nil); !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}

	// podwire status shows the same counters, per pod.
	st := n.podwireStatus(confFile)
	drops := map[string]*cliapi.Drops{}
	for _, a := range st.Attachments {
		drops[a.Pod] = a.Drops
	}
	if d := drops["shop/forger"]; d == nil || d.Packets < sent {
		t.Errorf("podwire status: forger's drops %+v, want >= %d packets", d, sent)
	}
	if d := drops["shop/honest"]; d == nil || d.Packets != 0 {
		t.Errorf("podwire status: honest pod's drops %+v, want 0 packets", d)
	}

	// The plugin's requests on the socket: one answered, one refused
	// (K8S_POD_UID is another pod's).
	reqs := func(f map[string]*dto.MetricFamily, name string) float64 {
		v, _ := metricValue(f, name, map[string]string{"op": "pod"})
		return v
	}
	before := ta.scrape(t)
	if _, err := n.addPodNoCapability("default", "asked", uid, nil); err != nil {
		t.Fatalf("ADD asking the agent: %v\nlog:\n%s", err, n.Log())
	}
	if _, err := n.addPodNoCapability("default", "asked", "6f1c2a52-0000-4000-8000-0000000000ff", nil); err == nil {
		t.Fatal("ADD with another pod's UID was not refused")
	}
	after := ta.scrape(t)
	if d := reqs(after, "podwire_agent_socket_requests_total") - reqs(before, "podwire_agent_socket_requests_total"); d != 2 {
		t.Errorf("socket requests rose by %v, want 2", d)
	}
	if d := reqs(after, "podwire_agent_socket_errors_total") - reqs(before, "podwire_agent_socket_errors_total"); d != 1 {
		t.Errorf("socket errors rose by %v, want 1", d)
	}
	if d := reqs(after, "podwire_agent_socket_request_duration_seconds") - reqs(before, "podwire_agent_socket_request_duration_seconds"); d != 2 {
		t.Errorf("socket latency observations rose by %v, want 2", d)
	}
	if v, _ := metricValue(after, "podwire_refusals_total", map[string]string{"reason": "uid-mismatch"}); v != 1 {
		t.Errorf("podwire_refusals_total{reason=uid-mismatch} = %v, want 1", v)
	}

	// The plugin's own refusals, by the gate that refused: a forwarding
	// pod in a namespace forwarding.namespaces does not match, and an
	// annotation that does not parse. The plugin reports each to the agent
	// before the ADD returns its CNI error.
	refusals := func(f map[string]*dto.MetricFamily, reason string) float64 {
		v, _ := metricValue(f, "podwire_refusals_total", map[string]string{"reason": reason})
		return v
	}
	before = ta.scrape(t)
	for _, tc := range []struct {
		name, reason string
		ann          map[string]string
	}{
		{"pushy", "forwarding-namespace", map[string]string{"podwire.io/forwarding": "true"}},
		{"garbled", "bad-annotation", map[string]string{"podwire.io/forwarding": "maybe"}},
	} {
		if _, err := n.addPod(podSpec{version: "0.3.1", list: list, namespace: "shop", name: tc.name, annotations: tc.ann}); err == nil {
			t.Fatalf("ADD of %s (%v) was not refused", tc.name, tc.ann)
		}
		after = ta.scrape(t)
		if d := refusals(after, tc.reason) - refusals(before, tc.reason); d != 1 {
			t.Errorf("podwire_refusals_total{reason=%s} rose by %v after %s's refused ADD, want 1", tc.reason, d, tc.name)
		}
		before = after
	}
	// Each refusal is also a Warning Event on the pod naming the gate,
	// recorded asynchronously by the agent's event recorder.
	if err := eventually(5*time.Second, func() error {
		evs, err := ta.events.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		seen := map[string]string{}
		for _, e := range evs.Items {
			if e.Reason == "PodwireRefused" && e.InvolvedObject.Kind == "Pod" && e.Type == "Warning" {
				seen[e.InvolvedObject.Name] = e.Message
			}
		}
		for pod, gate := range map[string]string{"pushy": "forwarding-namespace", "garbled": "bad-annotation"} {
			if !strings.Contains(seen[pod], gate) || !strings.Contains(seen[pod], "podwire.io/forwarding") {
				return fmt.Errorf("no PodwireRefused Event on shop/%s naming %s and the annotation (Events: %v)", pod, gate, seen)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	// Tables changed behind the agent's back are repaired and counted by
	// table: a flushed "bridge podwire" (rules gone) is rebuilt, an element
	// deleted from "inet podwire" re-added; "inet podwire" is not rebuilt.
	repairs := func(f map[string]*dto.MetricFamily, kind, table string) float64 {
		v, _ := metricValue(f, "podwire_table_repairs_total", map[string]string{"kind": kind, "table": table})
		return v
	}
	before = ta.scrape(t)
	c := n.nftConn()
	c.FlushTable(&nftables.Table{Family: nftables.TableFamilyBridge, Name: "podwire"})
	inet := &nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire"}
	set, err := c.GetSetByName(inet, "pod-v4")
	if err != nil {
		t.Fatal(err)
	}
	els, err := c.GetSetElements(set)
	if err != nil || len(els) == 0 {
		t.Fatalf("elements of inet podwire's pod-v4: %v %v", els, err)
	}
	if err := c.SetDeleteElements(set, els[:1]); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := eventually(10*time.Second, func() error {
		after = ta.scrape(t)
		if d := repairs(after, "tables", "bridge podwire") - repairs(before, "tables", "bridge podwire"); d < 1 {
			return fmt.Errorf("podwire_table_repairs_total{kind=tables,table=bridge podwire} rose by %v", d)
		}
		if d := repairs(after, "elements", "inet podwire") - repairs(before, "elements", "inet podwire"); d < 1 {
			return fmt.Errorf("podwire_table_repairs_total{kind=elements,table=inet podwire} rose by %v", d)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if d := repairs(after, "tables", "inet podwire") - repairs(before, "tables", "inet podwire"); d != 0 {
		t.Errorf("inet podwire counted as rebuilt %v times; only an element of it was missing", d)
	}

	// A table deleted is rebuilt, and counted under its own name.
	before = after
	c.DelTable(inet)
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := eventually(10*time.Second, func() error {
		if d := repairs(ta.scrape(t), "tables", "inet podwire") - repairs(before, "tables", "inet podwire"); d < 1 {
			return fmt.Errorf("podwire_table_repairs_total{kind=tables,table=inet podwire} rose by %v", d)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// A deleted pod's series goes with its record.
	if err := forger.Del(); err != nil {
		t.Fatal(err)
	}
	if err := eventually(5*time.Second, func() error {
		if _, ok := metricValue(ta.scrape(t), "podwire_pod_dropped_packets_total", pod("forger")); ok {
			return fmt.Errorf("the deleted pod's drop series is still exported")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestAgentLogFormat runs the agent binary with --log-format=json and
// --log-level=warn against an API server that does not answer (a port
// nothing listens on in the node netns): every line on its stderr is a
// JSON object, none below WARN, and client-go's own complaints (klog, from
// its informers) are among them, through the same handler. The binary's
// --metrics-bind-address serves /metrics meanwhile.
func TestAgentLogFormat(t *testing.T) {
	agentBin := filepath.Join(filepath.Dir(podwireBin), "podwire-agent")
	if _, err := os.Stat(agentBin); err != nil {
		t.Fatalf("the agent binary beside the plugin: %v (make build)", err)
	}
	n := newNode(t)
	kubeconfig := filepath.Join(n.Dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	confDir := filepath.Join(n.Dir, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-primary.conflist"), n.primaryList("0.3.1", nil), 0o644); err != nil {
		t.Fatal(err)
	}
	e, _ := json.Marshal(n.podwireEntry(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, agentBin, "--log-format=json", "--log-level=warn",
		"--node-name=worker-1", "--kubeconfig="+kubeconfig, "--state-dir="+n.StateDir(),
		"--cni-conf-dir="+confDir, "--cni-bin-dir="+filepath.Join(n.Dir, "bin"), "--plugin="+podwireBin,
		"--config="+string(e), "--health-addr=", "--interval=1s", "--metrics-bind-address="+metricsAddr)
	cmd.Stderr = &stderr
	// Started from a thread in the node netns: the agent and the plugin
	// it runs for the table repair act there.
	if err := n.NS.Do(func(ns.NetNS) error { return cmd.Start() }); err != nil {
		t.Fatal(err)
	}
	ta := &testAgent{nodeNS: n.NS}
	if err := eventually(5*time.Second, func() error {
		var c net.Conn
		if err := n.NS.Do(func(ns.NetNS) error {
			var err error
			c, err = net.DialTimeout("tcp", metricsAddr, time.Second)
			return err
		}); err != nil {
			return err
		}
		return c.Close()
	}); err != nil {
		cancel()
		_ = cmd.Wait()
		t.Fatalf("the agent binary serves no /metrics on %s: %v\n%s", metricsAddr, err, stderr.String())
	}
	fams := ta.scrape(t)
	if v, ok := metricValue(fams, "podwire_pods_wired", nil); !ok || v != 0 {
		t.Errorf("podwire_pods_wired from the binary: %v (present %v), want 0", v, ok)
	}
	if _, ok := fams["podwire_agent_build_info"]; !ok {
		t.Error("no podwire_agent_build_info from the binary")
	}
	_ = cmd.Wait() // ended by ctx: it would wait for the API for ever

	var klogLines int
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("not a JSON line: %q (%v)\n%s", l, err, stderr.String())
		}
		switch rec["level"] {
		case "WARN", "ERROR":
		default:
			t.Errorf("a %v record at --log-level=warn: %q", rec["level"], l)
		}
		if rec["msg"] == nil || rec["time"] == nil {
			t.Errorf("record without msg or time: %q", l)
		}
		// client-go's reflector reports the failed LIST through klog.
		if strings.Contains(l, "127.0.0.1:1") {
			klogLines++
		}
	}
	if klogLines == 0 {
		t.Errorf("no line of client-go's about the unreachable API server:\n%s", stderr.String())
	}
	// The agent's own records at info (podwire put in the chain) are left
	// out, and it did start: it installed the plugin.
	if strings.Contains(stderr.String(), `"level":"INFO"`) {
		t.Error("INFO records at --log-level=warn")
	}
	if _, err := os.Stat(filepath.Join(n.Dir, "bin", "podwire")); err != nil {
		t.Errorf("the agent did not get as far as installing the plugin: %v\n%s", err, stderr.String())
	}
}

// TestStatusDropsBridged: on a bridging primary (the bridge plugin on
// cni0) the drops are counted per bridge port in "bridge podwire": a pod
// that forges IP sources and claims a neighbour's address by gratuitous
// ARP has them all counted by `podwire status`, and an honest pod on the
// same bridge, whose own datagrams arrive, has none.
func TestStatusDropsBridged(t *testing.T) {
	n := newBridgedNode(t)
	setBrNetfilter(t, n, "0")
	be := n.newBackend()
	const port = 7101
	sink := newSink(t, be.ns.Path(), port)
	dst := netip.AddrPortFrom(be.v4, port)
	honest := n.mustAddPod(podSpec{namespace: "shop", name: "honest"})
	forger := n.mustAddPod(podSpec{namespace: "shop", name: "forger"})

	if err := packets.SendFrom(honest.NS.Path(), honest.v4, dst, "honest", 3); err != nil {
		t.Fatal(err)
	}
	if !sink.WaitGot(honest.v4, "honest", 3*time.Second) {
		t.Fatalf("the honest pod's datagrams from %s did not arrive", honest.v4)
	}
	const sent = 5
	forged := netip.MustParseAddr("10.99.0.5")
	if err := packets.SendFrom(forger.NS.Path(), forged, dst, "forged", sent); err != nil {
		t.Fatal(err)
	}
	if err := packets.SendGratuitousARP(forger.NS.Path(), "eth0", honest.v4); err != nil {
		t.Fatal(err)
	}
	if sink.WaitGot(forged, "forged", time.Second) {
		t.Fatalf("a forged source %s passed the bridge", forged)
	}

	conflist := n.writeConflist("1.1.0", nil)
	st := n.podwireStatus(conflist)
	drops := map[string]*cliapi.Drops{}
	for _, a := range st.Attachments {
		if a.HostBridge != "cni0" {
			t.Errorf("%s: hostBridge %q, want cni0 (the test would not read bridge podwire)", a.Pod, a.HostBridge)
		}
		drops[a.Pod] = a.Drops
	}
	if d := drops["shop/forger"]; d == nil || d.Packets < sent+1 {
		t.Errorf("forger's drops %+v, want >= %d packets (%d datagrams and the ARP claim)", d, sent+1, sent)
	}
	if d := drops["shop/honest"]; d == nil || d.Packets != 0 {
		t.Errorf("honest pod's drops %+v, want 0 packets", d)
	}
}
