package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/internal/testns"
)

// The VM suite's CNI client: integration/cnitest (the harness the
// integration, CRI and bench suites share) with a node netns per test and
// podwire chained after ptp + host-local (IPv4 only, no default routes).

// pluginDirs are where libcni finds podwire, ptp and host-local: the
// initramfs's /opt/cni/bin in the VM, else PODWIRE_BIN's directory and
// PODWIRE_CNI_BIN (as `make test-integration` sets them).
func pluginDirs(t testing.TB) []string {
	t.Helper()
	dirs := []string{"/opt/cni/bin"}
	if !inVM() {
		dirs = nil
		if b := os.Getenv("PODWIRE_BIN"); b != "" {
			dirs = append(dirs, filepath.Dir(b))
		}
		if d := os.Getenv("PODWIRE_CNI_BIN"); d != "" {
			dirs = append(dirs, d)
		}
	}
	if err := cnitest.CheckPlugins(dirs, "podwire", "ptp", "host-local"); err != nil {
		if inVM() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return dirs
}

// node is a simulated node: its netns, CNI cache, IPAM data and podwire state.
type node struct {
	t   testing.TB
	ns  ns.NetNS
	dir string
	cni *libcni.CNIConfig
	// podwire is the node's podwire config (keys of DESIGN.md).
	podwire map[string]any
}

func newNode(t testing.TB, podwire map[string]any) *node {
	t.Helper()
	dirs := pluginDirs(t)
	n := &node{t: t, ns: newNS(t), dir: t.TempDir(), podwire: podwire}
	n.cni = libcni.NewCNIConfigWithCacheDir(dirs, filepath.Join(n.dir, "cache"), nil)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("podwire log:\n%s", n.log())
		}
	})
	return n
}

// client is the node's runtime: libcni inside the node netns.
func (n *node) client() *cnitest.Client { return &cnitest.Client{NS: n.ns, CNI: n.cni} }

// do runs f in the node netns, failing the test on error.
func (n *node) do(f func() error) {
	n.t.Helper()
	if err := n.ns.Do(func(ns.NetNS) error { return f() }); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) stateDir() string { return filepath.Join(n.dir, "state") }
func (n *node) logFile() string  { return filepath.Join(n.dir, "podwire.log") }

func (n *node) log() string {
	b, _ := os.ReadFile(n.logFile())
	return string(b)
}

// chain is ptp + host-local then podwire with the node's keys.
func (n *node) chain(version string) cnitest.Chain {
	return cnitest.Chain{
		Name: "podwire-vm", Version: version, IPAMDir: filepath.Join(n.dir, "ipam"), V4Pool: "10.244.1.0/24",
		Plugins: []map[string]any{cnitest.PodwireEntry(n.stateDir(), n.logFile(), n.podwire)},
	}
}

// pod is one pod sandbox with its attachment.
type pod struct {
	n      *node
	ns     ns.NetNS
	list   *libcni.NetworkConfigList
	rt     *libcni.RuntimeConf
	result *current.Result
}

// addPod makes a pod netns (removed with the test) and runs ADD with the
// annotations, for CNI spec version 1.1.0.
func (n *node) addPod(annotations map[string]string) (*pod, error) {
	return n.addPodVersion("1.1.0", annotations)
}

// addPodVersion is addPod for a spec version. A failed ADD is followed by
// DEL, as a runtime does, and the pod netns is released. It never fails
// the test itself: tests run it in goroutines.
func (n *node) addPodVersion(version string, annotations map[string]string) (*pod, error) {
	list, err := n.chain(version).List()
	if err != nil {
		return nil, err
	}
	sb, err := n.client().AddSandbox(list, cnitest.PodArgs{Annotations: annotations})
	if err != nil {
		return nil, err
	}
	p := &pod{n: n, ns: sb.NS, list: list, rt: sb.RT, result: sb.Result}
	n.t.Cleanup(func() {
		_ = p.del()
		testns.Release(p.ns)
	})
	return p, nil
}

func (n *node) mustAddPod(annotations map[string]string) *pod {
	n.t.Helper()
	p, err := n.addPod(annotations)
	if err != nil {
		n.t.Fatalf("ADD %v: %v\nlog:\n%s", annotations, err, n.log())
	}
	return p
}

func (p *pod) del() error { return p.n.client().Del(p.list, p.rt) }

// delNoNetns runs DEL as a runtime's second DEL: no netns.
func (p *pod) delNoNetns() error { return p.n.client().DelNoNetns(p.list, p.rt) }

func (p *pod) check() error { return p.n.client().Check(p.list, p.rt) }

// checkPodwire runs CHECK of podwire alone (cnitest.Client.CheckLast: ptp
// refuses a result with static VLAN IPs on net1).
func (p *pod) checkPodwire() error { return p.n.client().CheckLast(p.list, p.rt) }

// gc runs GC with valid as the valid attachments.
func (n *node) gc(valid ...*pod) error {
	list, err := n.chain("1.1.0").List()
	if err != nil {
		return err
	}
	var rts []*libcni.RuntimeConf
	for _, p := range valid {
		rts = append(rts, p.rt)
	}
	return n.client().GC(list, rts...)
}

// leftovers lists podwire's host veths in the node netns and its records.
func (n *node) leftovers() []string {
	var out []string
	n.do(func() error {
		links, err := netlinksafe.LinkList()
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, "pwv") {
				out = append(out, "link "+l.Attrs().Name)
			}
		}
		return err
	})
	entries, _ := os.ReadDir(n.stateDir())
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			out = append(out, "record "+e.Name())
		}
	}
	return out
}

// cniCode is the CNI error code of err (libcni wraps it), or 0.
var cniCode = cnitest.CNICode
