package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/podwire/podwire/pkg/agent"
)

// These tests run the real agent (pkg/agent, in-process, on a thread inside
// the node netns so that its table repair, which execs the installed plugin,
// acts there) against client-go's fake API clients, with real files, a real
// unix socket and the real plugin run by libcni. What needs a real API
// server (RBAC, field selectors, the in-cluster config) is proven in
// integration/k8s.

// testAgent is a running agent and its fake API.
type testAgent struct {
	confDir, binDir string
	events          *kfake.Clientset
	stop            func()
	// nodeNS holds the agent's /metrics, on metricsAddr.
	nodeNS ns.NetNS
	agent  *agent.Agent
	// md is the fake API the agent reads pods and nodes from.
	md *metadatafake.FakeMetadataClient
}

// metricsAddr is where the test agents serve /metrics: inside each test's
// own node netns, so the port is free whatever else runs.
const metricsAddr = "127.0.0.1:9178"

// kpod and knode are API objects as the metadata client returns them.
func kpod(namespace, name, uid string, ann map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: ktypes.UID(uid), Annotations: ann}}
}

func knode(name string, ann map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: "node-uid-1", Annotations: ann}}
}

// startAgent runs the agent for node n with the primary conflist primary
// (written into a conf dir of its own) and podwire's entry entry (nil:
// keep/default), serving the API objects objs. stop is idempotent and also
// runs at cleanup.
func (n *node) startAgent(primary []byte, entry map[string]any, objs ...*metav1.PartialObjectMetadata) *testAgent {
	n.t.Helper()
	return n.startAgentWith(nil, primary, entry, objs...)
}

// startAgentWith is startAgent with the agent's Config changed by edit
// (nil: none) before it starts.
func (n *node) startAgentWith(edit func(*agent.Config), primary []byte, entry map[string]any, objs ...*metav1.PartialObjectMetadata) *testAgent {
	n.t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		n.t.Fatal(err)
	}
	var ro []runtime.Object
	for _, o := range objs {
		ro = append(ro, o)
	}
	md := metadatafake.NewSimpleMetadataClient(scheme, ro...)
	ta := &testAgent{confDir: filepath.Join(n.Dir, "net.d"), binDir: filepath.Join(n.Dir, "bin"), events: kfake.NewSimpleClientset(), nodeNS: n.NS, md: md}
	if err := os.MkdirAll(ta.confDir, 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ta.confDir, "10-primary.conflist"), primary, 0o644); err != nil {
		n.t.Fatal(err)
	}
	var e []byte
	if entry != nil {
		e, _ = json.Marshal(entry)
	}
	cfg := agent.Config{
		Node: "worker-1", StateDir: n.StateDir(), Timing: agent.Timing{Interval: time.Second}, Serve: agent.Serve{MetricsAddr: metricsAddr},
		Chain: agent.Chain{ConfDir: ta.confDir, BinDir: ta.binDir, Plugin: podwireBin, Entry: e, Mode: agent.ModeAuto},
	}
	if edit != nil {
		edit(&cfg)
	}
	a := agent.New(cfg, md, ta.events.CoreV1(), slog.New(slog.NewTextHandler(&testLog{t: n.t}, nil)))
	ta.agent = a
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- n.NS.Do(func(ns.NetNS) error { return a.Run(ctx) })
	}()
	var once sync.Once
	ta.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				n.t.Errorf("agent: %v", err)
			}
		})
	}
	n.t.Cleanup(ta.stop)
	sock := filepath.Join(n.StateDir(), "agent.sock")
	if err := eventually(10*time.Second, func() error {
		if st := a.Status(); !st.Ready {
			return fmt.Errorf("agent not ready: %+v", st)
		}
		_, err := os.Stat(sock)
		return err
	}); err != nil {
		n.t.Fatal(err)
	}
	return ta
}

// testLog sends the agent's log to the test's.
type testLog struct{ t testing.TB }

func (l *testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// primaryList is the harness's ptp + host-local primary alone, at version,
// as a primary's installer writes it; withPodwire appends podwire's entry.
func (n *node) primaryList(version string, podwire map[string]any) []byte {
	n.t.Helper()
	var list map[string]any
	if err := json.Unmarshal(n.conflist(version, podwire).Bytes, &list); err != nil {
		n.t.Fatal(err)
	}
	if podwire == nil {
		list["plugins"] = list["plugins"].([]any)[:1]
	}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

// podwireEntry is the podwire entry the harness uses, with extra keys
// (claims checked on the node: the agent here has no API for the
// cluster's).
func (n *node) podwireEntry(extra map[string]any) map[string]any {
	e := map[string]any{"type": "podwire", "stateDir": n.StateDir(), "logFile": n.LogFile(),
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true}, "claimScope": "node"}
	for k, v := range extra {
		e[k] = v
	}
	return e
}

// waitEgressFile waits up to 10 s until the agent has written the Node's
// egress annotation into stateDir, where the plugin reads it.
func (n *node) waitEgressFile() {
	n.t.Helper()
	if err := eventually(10*time.Second, func() error {
		_, err := os.Stat(filepath.Join(n.StateDir(), "node-egress-ip.cache"))
		return err
	}); err != nil {
		n.t.Fatalf("agent did not write the node annotation: %v", err)
	}
}

// addPodNoCapability runs ADD for namespace/name with K8S_POD_UID uid and
// no annotations capability (an old runtime): podwire asks the agent.
func (n *node) addPodNoCapability(namespace, name, uid string, conf map[string]any) (*pod, error) {
	return n.addPod(podSpec{version: "1.1.0", namespace: namespace, name: name, uid: uid, noCapability: true, podwire: conf})
}

// TestAgentServesAnnotations: with the runtime capability off, the plugin
// asks the agent over its unix socket; the agent answers from its informer;
// a pod whose K8S_POD_UID differs is refused and nothing is left; with no
// agent the ADD fails with CNI error 11 within the plugin's bounded wait.
// Then, with the agent gone, the DEL of the pod wired before works.
func TestAgentServesAnnotations(t *testing.T) {
	n := newNode(t)
	const uid = "6f1c2a52-0000-4000-8000-000000000001"
	ta := n.startAgent(n.primaryList("0.3.1", nil), nil,
		knode("worker-1", nil),
		kpod("nf-agent", "router", uid, map[string]string{"podwire.io/forwarding": "true"}))

	p, err := n.addPodNoCapability("nf-agent", "router", uid, fwdConfig)
	if err != nil {
		t.Fatalf("ADD with annotations from the agent: %v\nlog:\n%s", err, n.Log())
	}
	var fwd string
	if err := p.NS.Do(func(ns.NetNS) error { fwd, err = sysctl.Sysctl("net.ipv4.ip_forward"); return err }); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(fwd) != "1" || !strings.Contains(n.Log(), "annotations=agent") {
		t.Fatalf("forwarding annotation from the agent not applied: ip_forward=%s\nlog:\n%s", fwd, n.Log())
	}

	_, err = n.addPodNoCapability("nf-agent", "router", "6f1c2a52-0000-4000-8000-00000000dead", fwdConfig)
	if err == nil || !strings.Contains(err.Error(), "UID") {
		t.Fatalf("ADD with a UID mismatch: err = %v, want a refusal naming the UID", err)
	}
	n.mustRecords(t, 1, "after the refusal")

	ta.stop()
	start := time.Now()
	_, err = n.addPodNoCapability("nf-agent", "router2", uid, fwdConfig)
	took := time.Since(start)
	t.Logf("no agent: %v after %v", err, took)
	if cniCode(err) != 11 || took > 20*time.Second {
		t.Fatalf("ADD with no agent: err = %v (code %d) after %v, want code 11 within the bounded wait", err, cniCode(err), took)
	}
	// Uninstall never strands a pod: DEL works from stateDir alone.
	if err := p.Del(); err != nil {
		t.Fatalf("DEL of a pod wired before, with the agent gone: %v", err)
	}
	n.mustRecords(t, 0, "after DEL without the agent")
}

// TestAgentKeepsChainAndRepairs: on a node whose primary conflist is at
// 0.3.1, the agent installs the binary and puts podwire in the chain; after
// the primary rewrites its conflist the entry is back within 10 s and a pod
// created from the conf dir right after is source-checked (a spoofed packet
// is dropped); after `nft flush ruleset` the tables are back within 10 s
// with no ADD, the spoof is dropped again, and an Event is on the Node.
func TestAgentKeepsChainAndRepairs(t *testing.T) {
	n := newNode(t)
	primary := n.primaryList("0.3.1", nil)
	ta := n.startAgent(primary, n.podwireEntry(nil), knode("worker-1", nil))
	confFile := filepath.Join(ta.confDir, "10-primary.conflist")
	if _, err := os.Stat(filepath.Join(ta.binDir, "podwire")); err != nil {
		t.Fatalf("plugin binary not installed: %v", err)
	}
	// The primary's type, for the plugin's STATUS (which sees only its own
	// entry): ptp here, whose pods podwire checks without a warning.
	if typ, err := os.ReadFile(filepath.Join(n.StateDir(), "primary-type")); err != nil || string(typ) != "ptp" {
		t.Fatalf("stateDir/primary-type: %q %v, want ptp", typ, err)
	}

	// The primary's installer rewrites its file without podwire.
	if err := os.WriteFile(confFile, primary, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var list *libcni.NetworkConfigList
	if err := eventually(10*time.Second, func() error {
		l, err := libcni.ConfListFromFile(confFile)
		if err != nil {
			return err
		}
		if len(l.Plugins) != 2 || l.Plugins[1].Network.Type != "podwire" {
			return fmt.Errorf("podwire not in %s", confFile)
		}
		list = l
		return nil
	}); err != nil {
		t.Fatalf("entry not restored within 10 s: %v", err)
	}
	t.Logf("entry restored after %v", time.Since(start))

	be := n.newBackend()
	srv := listenTCP(t, be.ns, "[::]:0")
	dst := netip.AddrPortFrom(be.v4, srv.port())
	p := n.mustAddPod(podSpec{version: "0.3.1", list: list})
	if err := eventually(3*time.Second, func() error { return dialTCP(p.NS, p.v4, dst, time.Second) }); err != nil {
		t.Fatalf("pod's own traffic: %v", err)
	}
	spoof := spoofSetup(t, n, p, false)
	if err := dialTCP(p.NS, spoof, dst, time.Second); err == nil {
		t.Fatalf("spoofed source %s passed: the pod created after the restore is not source-checked", spoof)
	}

	repairEvents := func() int {
		evs, err := ta.events.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, e := range evs.Items {
			if e.Reason == agent.ReasonTablesRepaired && e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == "worker-1" {
				k++
			}
		}
		return k
	}
	before := repairEvents()
	// nft flush ruleset, in the node netns.
	c := n.nftConn()
	c.FlushRuleset()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := dialTCP(p.NS, spoof, dst, time.Second); err != nil {
		t.Fatalf("after the flush the spoof must pass (nothing checks it), got %v: the test would prove nothing", err)
	}
	start = time.Now()
	if err := eventually(10*time.Second, func() error {
		if err := dialTCP(p.NS, spoof, dst, 500*time.Millisecond); err == nil {
			return fmt.Errorf("spoof still passes")
		}
		return nil
	}); err != nil {
		t.Fatalf("tables not repaired within 10 s of the flush: %v\n%s", err, nftList(t, n.NS))
	}
	t.Logf("tables repaired after %v, with no ADD", time.Since(start))
	if err := dialTCP(p.NS, p.v4, dst, time.Second); err != nil {
		t.Fatalf("pod's own traffic after the repair: %v", err)
	}
	// One Event per cause a minute: when the lay-down at the start was
	// recorded with the same message, that Event is the flush's too.
	if err := eventually(5*time.Second, func() error {
		if k := repairEvents(); k == 0 {
			return fmt.Errorf("%d %s Events on the Node (%d before the flush)", k, agent.ReasonTablesRepaired, before)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// podwire status shows the agent's state.
	if st := n.podwireStatus(confFile); st.Agent == nil || !st.Agent.Ready || st.Agent.Restores < 1 || st.Agent.Repairs < 1 {
		t.Fatalf("podwire status does not show the agent's restores and repairs: %+v", st.Agent)
	}
}
