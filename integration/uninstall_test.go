package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/podwire/podwire/pkg/agent"
	"github.com/podwire/podwire/pkg/install"
	"github.com/podwire/podwire/pkg/nft"
)

// These tests prove the chart's cni.uninstall on one node: the real agent
// (in-process, in the node netns, against client-go's fake metadata API
// holding its DaemonSet) and the real plugin binary, run by libcni from a
// bin dir of the test's own, so that the plugin may remove itself.

var daemonSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}

// kdaemonset is the agent's DaemonSet as the metadata client returns it.
func kdaemonset(uid string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "podwire-system", Name: "podwire-agent", UID: ktypes.UID(uid)}}
}

// uninstallNode is a node whose runtime finds podwire in binDir, where the
// agent installs it, and whose conflist is confDir/10-primary.conflist.
type uninstallNode struct {
	*node
	binDir, confDir string
	md              *metadatafake.FakeMetadataClient
	// mode is the agent's chain mode (default auto: edit for ptp).
	mode string
}

func newUninstallNode(t *testing.T) *uninstallNode {
	n := newNode(t)
	u := &uninstallNode{node: n, binDir: filepath.Join(n.Dir, "bin"), confDir: filepath.Join(n.Dir, "net.d")}
	n.CNI = libcni.NewCNIConfigWithCacheDir([]string{u.binDir, cniBinDir}, filepath.Join(n.Dir, "cache"), nil)
	if err := os.MkdirAll(u.confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(u.primary(), n.primaryList("0.3.1", nil), 0o644); err != nil {
		t.Fatal(err)
	}
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	u.md = metadatafake.NewSimpleMetadataClient(scheme, []runtime.Object{knode("worker-1", nil), kdaemonset("ds-uid-1")}...)
	return u
}

func (u *uninstallNode) primary() string { return filepath.Join(u.confDir, "10-primary.conflist") }
func (u *uninstallNode) binary() string  { return filepath.Join(u.binDir, "podwire") }

// startAgent runs the agent with cni.uninstall until the returned stop,
// which ends it as SIGTERM does and waits for its stop to be done.
func (u *uninstallNode) startAgent() (stop func()) {
	u.t.Helper()
	entry, err := json.Marshal(u.podwireEntry(nil))
	if err != nil {
		u.t.Fatal(err)
	}
	return u.runAgent(agent.Config{
		Chain:   agent.Chain{Entry: entry},
		Cluster: agent.ClusterWatch{Uninstall: agent.NewUninstall(u.md, "podwire-system", "podwire-agent", 0)},
	})
}

// runAgent runs an agent of cfg on u (node worker-1, u's stateDir, a 1 s
// drift tick, and the chain of u's conf dir and bin dir with the plugin
// under test in u's mode, where cfg leaves them empty) until the returned stop, which
// ends it as SIGTERM does and waits for its stop to be done. It returns
// once the agent is Ready.
func (u *uninstallNode) runAgent(cfg agent.Config) (stop func()) {
	t := u.t
	t.Helper()
	if cfg.Node == "" {
		cfg.Node = "worker-1"
	}
	if cfg.StateDir == "" {
		cfg.StateDir = u.StateDir()
	}
	if cfg.Timing.Interval == 0 {
		cfg.Timing.Interval = time.Second
	}
	if cfg.Chain.ConfDir == "" {
		cfg.Chain.ConfDir, cfg.Chain.BinDir, cfg.Chain.Plugin, cfg.Chain.Mode = u.confDir, u.binDir, podwireBin, u.mode
	}
	log := slog.New(slog.NewTextHandler(&testLog{t: t}, nil))
	if cfg.ID != "" {
		log = log.With("agent", cfg.ID)
	}
	a := agent.New(cfg, u.md, nil, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.NS.Do(func(ns.NetNS) error { return a.Run(ctx) }) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent %s: %v", cfg.ID, err)
		}
	}
	t.Cleanup(stop)
	if err := eventually(10*time.Second, func() error {
		if st := a.Status(); !st.Ready {
			return fmt.Errorf("agent %s not ready: %+v", cfg.ID, st)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return stop
}

// entry is podwire's entry in the node's conflist (ok false when the
// conflist names no podwire).
func (u *uninstallNode) entry() (raw json.RawMessage, ok bool) {
	u.t.Helper()
	data, err := os.ReadFile(u.primary())
	if err != nil {
		u.t.Fatal(err)
	}
	raw, ok, err = install.Entry(data)
	if err != nil {
		u.t.Fatalf("%s: %v", u.primary(), err)
	}
	return raw, ok
}

// chainHasPodwire reports whether the node's conflist names podwire.
func (u *uninstallNode) chainHasPodwire() bool {
	_, ok := u.entry()
	return ok
}

// list is the conflist as a runtime reads it from the conf dir (its first).
func (u *uninstallNode) list() *libcni.NetworkConfigList {
	u.t.Helper()
	l, err := libcni.LoadNetworkConf(u.confDir, "podwire-test")
	if err != nil {
		u.t.Fatal(err)
	}
	return l
}

// tables are the names of podwire's nftables tables in the node netns.
func (u *uninstallNode) tables() []string {
	u.t.Helper()
	ts, err := u.nftConn().ListTables()
	if err != nil {
		u.t.Fatal(err)
	}
	var out []string
	for _, t := range ts {
		if strings.HasPrefix(t.Name, nft.OwnerPrefix) {
			out = append(out, t.Name)
		}
	}
	return out
}

// forge is spoofSetup with another address: pod p gets addr, which it
// does not own, and the node a route back to it through p.
func (u *uninstallNode) forge(p *pod, addr string) netip.Addr {
	u.t.Helper()
	doIn(u.t, p.NS, [][]string{{"ip", "addr", "add", addr + "/32", "dev", "eth0"}})
	u.Do(func() error {
		return runAll([][]string{{"ip", "route", "add", addr + "/32", "via", p.v4.String(), "dev", p.hostIf()}})
	})
	return netip.MustParseAddr(addr)
}

func exists(path string) bool { _, err := os.Lstat(path); return err == nil }

// TestUninstallLastDelCleansNode: an agent stopped while its DaemonSet is
// in place (a restart, an update) changes nothing. Stopped after the
// DaemonSet's deletion, it marks the uninstall: podwire's entry, binary,
// tables and records stay while pods podwire wired are left (containerd
// runs their DEL through the chain it has then), the remaining pod is
// still source-checked (a forged source is dropped) between the DELs, and
// a pod created meanwhile is not wired (its forged source passes). The
// last DEL, run by the runtime from its config, takes the entry out of the
// conflist and removes the binary, the tables and stateDir. A reinstall
// then wires a new pod as before.
func TestUninstallLastDelCleansNode(t *testing.T) {
	u := newUninstallNode(t)
	stop := u.startAgent()
	if !exists(u.binary()) || !u.chainHasPodwire() {
		t.Fatal("the agent did not install the binary and the entry")
	}
	list := u.list()
	p1 := u.mustAddPod(podSpec{version: "0.3.1", list: list})
	p2 := u.mustAddPod(podSpec{version: "0.3.1", list: list})
	be := u.newBackend()
	srv := listenTCP(t, be.ns, "[::]:0")
	dst := netip.AddrPortFrom(be.v4, srv.port())
	if err := eventually(3*time.Second, func() error { return dialTCP(p2.NS, p2.v4, dst, time.Second) }); err != nil {
		t.Fatalf("pod's own traffic: %v", err)
	}
	spoof := spoofSetup(t, u.node, p2, false)
	if err := dialTCP(p2.NS, spoof, dst, time.Second); err == nil {
		t.Fatalf("forged source %s passed before the uninstall", spoof)
	}

	// A restart: the DaemonSet is in place.
	stop()
	if !u.chainHasPodwire() || !exists(u.binary()) || exists(filepath.Join(u.StateDir(), install.UninstalledName)) {
		t.Fatal("an agent stopped with its DaemonSet in place changed the node")
	}

	// The uninstall: the DaemonSet is deleted, then its pod stops.
	stop = u.startAgent()
	if err := u.md.Resource(daemonSets).Namespace("podwire-system").Delete(context.Background(), "podwire-agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stop()
	if !exists(filepath.Join(u.StateDir(), install.UninstalledName)) {
		t.Fatal("no uninstall marker after the agent's stop for an uninstall")
	}
	if !u.chainHasPodwire() || !exists(u.binary()) || len(u.records()) != 2 || len(u.tables()) == 0 {
		t.Fatalf("entry %v, binary %v, records %v, tables %v: want all kept while pods are wired", u.chainHasPodwire(), exists(u.binary()), u.records(), u.tables())
	}
	// A pod created now is not wired: its forged source passes.
	p3 := u.mustAddPod(podSpec{version: "0.3.1", list: u.list()})
	spoof3 := u.forge(p3, "10.99.0.6")
	if err := eventually(3*time.Second, func() error { return dialTCP(p3.NS, spoof3, dst, time.Second) }); err != nil {
		t.Fatalf("a pod created after the uninstall is still checked (forged %s: %v)", spoof3, err)
	}

	for i, p := range []*pod{p1, p2} {
		if err := p.Del(); err != nil {
			t.Fatalf("DEL %d after the uninstall: %v\nlog:\n%s", i+1, err, u.Log())
		}
		if !u.chainHasPodwire() || !exists(u.binary()) || len(u.records()) != 2-i || len(u.tables()) == 0 {
			t.Fatalf("after DEL %d: entry %v, binary %v, records %v, tables %v: want all kept for the pods left", i+1, u.chainHasPodwire(), exists(u.binary()), u.records(), u.tables())
		}
		if i == 0 {
			if err := dialTCP(p2.NS, spoof, dst, time.Second); err == nil {
				t.Fatalf("forged source %s passed between the DELs: the remaining pod is no longer checked", spoof)
			}
			if err := dialTCP(p2.NS, p2.v4, dst, time.Second); err != nil {
				t.Fatalf("the remaining pod's own traffic: %v", err)
			}
		}
	}

	if err := p3.Del(); err != nil {
		t.Fatalf("last DEL after the uninstall: %v\nlog:\n%s", err, u.Log())
	}
	if u.chainHasPodwire() || exists(u.binary()) || exists(u.StateDir()) || len(u.tables()) != 0 {
		t.Fatalf("after the last DEL: entry %v, binary %v, stateDir %v, tables %v: want none\nlog:\n%s", u.chainHasPodwire(), exists(u.binary()), exists(u.StateDir()), u.tables(), u.Log())
	}
	if files, _ := filepath.Glob(filepath.Join(u.confDir, "*")); len(files) != 1 {
		t.Fatalf("conf dir after the last DEL: %v, want only the primary's conflist", files)
	}
	if !strings.Contains(u.Log(), "last attachment gone, node cleaned") {
		t.Fatalf("the last DEL did not log the cleanup:\n%s", u.Log())
	}

	// A reinstall: a new DaemonSet, a new agent, a new pod.
	if _, err := u.md.Resource(daemonSets).Namespace("podwire-system").(interface {
		CreateFake(*metav1.PartialObjectMetadata, metav1.CreateOptions, ...string) (*metav1.PartialObjectMetadata, error)
	}).CreateFake(kdaemonset("ds-uid-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u.startAgent()
	p4 := u.mustAddPod(podSpec{version: "0.3.1", list: u.list()})
	spoof4 := u.forge(p4, "10.99.0.7")
	if err := dialTCP(p4.NS, spoof4, dst, time.Second); err == nil {
		t.Fatalf("forged source %s of a pod wired after the reinstall passed", spoof4)
	}
	if err := p4.Del(); err != nil {
		t.Fatal(err)
	}
	if !exists(u.binary()) || !u.chainHasPodwire() {
		t.Fatal("a DEL after the reinstall removed podwire")
	}
}

// TestUninstallKeepsNodeWithUnreadableRecord: with the uninstall marker, a
// DEL that leaves a record it cannot read removes nothing node-wide (that
// record might name a pod whose DEL needs the binary), and says so; once
// the record is gone, the next DEL (here a runtime's repeated one) cleans.
func TestUninstallKeepsNodeWithUnreadableRecord(t *testing.T) {
	u := newUninstallNode(t)
	stop := u.startAgent()
	p := u.mustAddPod(podSpec{version: "0.3.1", list: u.list()})
	if err := u.md.Resource(daemonSets).Namespace("podwire-system").Delete(context.Background(), "podwire-agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stop()
	corrupt := filepath.Join(u.StateDir(), "corrupt_eth0.json")
	if err := os.WriteFile(corrupt, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Del(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if !exists(u.binary()) || !exists(u.StateDir()) || len(u.tables()) == 0 {
		t.Fatalf("binary %v, stateDir %v, tables %v: want all kept with an unreadable record", exists(u.binary()), exists(u.StateDir()), u.tables())
	}
	if !strings.Contains(u.Log(), "cannot all be read") {
		t.Fatalf("the log does not say why the node was kept:\n%s", u.Log())
	}
	if err := os.Remove(corrupt); err != nil {
		t.Fatal(err)
	}
	if err := p.DelNoNetns(); err != nil {
		t.Fatalf("repeated DEL: %v", err)
	}
	if exists(u.binary()) || exists(u.StateDir()) || len(u.tables()) != 0 {
		t.Fatalf("after the repeated DEL: binary %v, stateDir %v, tables %v: want none", exists(u.binary()), exists(u.StateDir()), u.tables())
	}
}

// deleteDaemonSet deletes the agent's DaemonSet, as helm uninstall does.
func (u *uninstallNode) deleteDaemonSet() {
	u.t.Helper()
	if err := u.md.Resource(daemonSets).Namespace("podwire-system").Delete(context.Background(), "podwire-agent", metav1.DeleteOptions{}); err != nil {
		u.t.Fatal(err)
	}
}

// TestUninstallWithoutPods: on a node where podwire wired no pod (one was
// wired and deleted before), the agent's stop for an uninstall removes
// podwire at once: the entry and its backup, the binary, the tables and
// stateDir; the primary's conflist is as the primary wrote it.
func TestUninstallWithoutPods(t *testing.T) {
	u := newUninstallNode(t)
	original, err := os.ReadFile(u.primary())
	if err != nil {
		t.Fatal(err)
	}
	stop := u.startAgent()
	p := u.mustAddPod(podSpec{version: "0.3.1", list: u.list()})
	if err := p.Del(); err != nil {
		t.Fatal(err)
	}
	if len(u.tables()) == 0 {
		t.Fatal("no podwire table before the uninstall: the test would prove nothing")
	}
	u.deleteDaemonSet()
	stop()
	if exists(u.binary()) || exists(u.StateDir()) || len(u.tables()) != 0 {
		t.Fatalf("binary %v, stateDir %v, tables %v: want none", exists(u.binary()), exists(u.StateDir()), u.tables())
	}
	if files, _ := filepath.Glob(filepath.Join(u.confDir, "*")); len(files) != 1 {
		t.Fatalf("conf dir: %v, want only the primary's conflist", files)
	}
	if got, _ := os.ReadFile(u.primary()); !jsonEqual(t, got, original) {
		t.Fatalf("the primary's conflist after the uninstall:\n%s\nwant as the primary wrote it:\n%s", got, original)
	}
}

// TestUninstallDeriveMode: in derive mode (a primary like Cilium's, whose
// file podwire never touches) the last DEL removes the derived conflist,
// 00-podwire.conflist, that kept podwire in the chain until then.
func TestUninstallDeriveMode(t *testing.T) {
	u := newUninstallNode(t)
	u.mode = agent.ModeDerive
	original, err := os.ReadFile(u.primary())
	if err != nil {
		t.Fatal(err)
	}
	stop := u.startAgent()
	derived := filepath.Join(u.confDir, agent.DerivedName)
	list, err := libcni.ConfListFromFile(derived)
	if err != nil {
		t.Fatalf("no derived conflist: %v", err)
	}
	p := u.mustAddPod(podSpec{version: "0.3.1", list: list})
	u.deleteDaemonSet()
	stop()
	if !exists(derived) || !exists(u.binary()) {
		t.Fatalf("derived conflist %v, binary %v: want both kept while the pod runs", exists(derived), exists(u.binary()))
	}
	if err := p.Del(); err != nil {
		t.Fatalf("DEL: %v\nlog:\n%s", err, u.Log())
	}
	if exists(derived) || exists(u.binary()) || exists(u.StateDir()) || len(u.tables()) != 0 {
		t.Fatalf("after the last DEL: derived %v, binary %v, stateDir %v, tables %v: want none", exists(derived), exists(u.binary()), exists(u.StateDir()), u.tables())
	}
	if got, _ := os.ReadFile(u.primary()); string(got) != string(original) {
		t.Fatalf("the primary's conflist changed in derive mode:\n%s", got)
	}
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}
