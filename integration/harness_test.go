// Package integration runs the built podwire binary through libcni, chained
// after the reference ptp + host-local plugins, inside throwaway network
// namespaces: a "node" netns per test and a netns per pod. Nothing here
// touches the host's own netns, links, ruleset or sysctls.
//
// Environment: PODWIRE_BIN (the podwire binary) and PODWIRE_CNI_BIN (a
// directory with ptp and host-local v1.9.1), as set by `make test-integration`.
package integration

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/internal/testns"
	"github.com/podwire/podwire/pkg/cliapi"
)

// specVersions are the CNI spec versions every verb is tested with: 0.3.x
// because the stock flannel, Calico and Cilium conflists declare 0.3.1.
var specVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// hasCheck reports whether spec version v has the CHECK verb (0.4.0 and
// later; libcni refuses CHECK for older lists before any plugin runs).
func hasCheck(v string) bool { return v != "0.3.0" && v != "0.3.1" }

var (
	podwireBin string
	cniBinDir  string
)

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "integration tests need root (network namespaces, nftables)")
		os.Exit(1)
	}
	podwireBin = cnitest.PodwireBin()
	cniBinDir = cnitest.CNIBinDir()
	for _, p := range []string{podwireBin, filepath.Join(cniBinDir, "ptp"), filepath.Join(cniBinDir, "host-local")} {
		if _, err := os.Stat(p); err != nil {
			fmt.Fprintf(os.Stderr, "missing %s: run `make build tools` (or `make test-integration`)\n", p)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// node is a simulated Kubernetes node: a netns with forwarding on, a CNI
// config dir of its own (libcni cache, host-local data, podwire state, log).
type node struct {
	t      *testing.T
	ns     ns.NetNS
	dir    string
	cni    *libcni.CNIConfig
	v4Pool string // pod subnet of ptp's host-local
	v6Pool string
	// ptpIPMasq turns on ptp's ipMasq (a primary plugin's masquerade at
	// srcnat, which podwire's egress SNAT must win over).
	ptpIPMasq bool
	// primary, when set, replaces ptp as the chain's first plugin (its
	// IPAM included), e.g. the reference bridge plugin.
	primary map[string]any
}

// newNode makes a node netns; the test's cleanup removes it and, since the
// netns goes away with it, every link, route and nftables table in it.
func newNode(t *testing.T) *node {
	t.Helper()
	nodeNS, err := testns.Make()
	if err != nil {
		t.Fatalf("failed to create node netns: %v", err)
	}
	n := &node{t: t, ns: nodeNS, dir: t.TempDir(), v4Pool: "10.244.1.0/24", v6Pool: "fd00:244:1::/64"}
	t.Cleanup(func() { testns.Release(nodeNS) })
	n.cni = libcni.NewCNIConfigWithCacheDir(
		[]string{filepath.Dir(podwireBin), cniBinDir}, filepath.Join(n.dir, "cache"), nil)
	if err := cnitest.Sysctls(nodeNS, cnitest.RouterSysctls...); err != nil {
		t.Fatalf("node: %v", err)
	}
	return n
}

// client is the node's runtime: libcni (n.cni, which a test may swap)
// inside the node netns.
func (n *node) client() *cnitest.Client { return &cnitest.Client{NS: n.ns, CNI: n.cni} }

// do runs f inside the node netns (fatal on error).
func (n *node) do(f func() error) {
	n.t.Helper()
	if err := n.ns.Do(func(ns.NetNS) error { return f() }); err != nil {
		n.t.Fatal(err)
	}
}

// linkCount is the number of links in the node's netns.
func (n *node) linkCount() int {
	var c int
	n.do(func() error {
		links, err := netlinksafe.LinkList()
		c = len(links)
		return err
	})
	return c
}

func (n *node) stateDir() string { return filepath.Join(n.dir, "state") }
func (n *node) logFile() string  { return filepath.Join(n.dir, "podwire.log") }

// chain is ptp + host-local (dual stack), or n.primary, then podwire with
// the given extra keys, for one spec version.
func (n *node) chain(version string, podwire map[string]any) cnitest.Chain {
	return cnitest.Chain{
		Name: "podwire-test", Version: version, IPAMDir: filepath.Join(n.dir, "ipam"),
		V4Pool: n.v4Pool, V6Pool: n.v6Pool, DefaultRoutes: true, MTU: 1500, IPMasq: n.ptpIPMasq,
		PrimaryEntry: n.primary,
		Plugins:      []map[string]any{cnitest.PodwireEntry(n.stateDir(), n.logFile(), podwire)},
	}
}

// conflist is chain parsed by libcni (test goroutine only: fatal on error).
func (n *node) conflist(version string, podwire map[string]any) *libcni.NetworkConfigList {
	n.t.Helper()
	l, err := n.chain(version, podwire).List()
	if err != nil {
		n.t.Fatal(err)
	}
	return l
}

// writeConflist writes n's chain for version (podwire without extra keys)
// as the node's conflist file, for the CLI (`podwire status`, `repair`), and
// returns its path.
func (n *node) writeConflist(version string) string {
	n.t.Helper()
	raw, err := n.chain(version, nil).Bytes()
	if err != nil {
		n.t.Fatal(err)
	}
	path := filepath.Join(n.dir, "10-primary.conflist")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		n.t.Fatal(err)
	}
	return path
}

// podwireStatus runs `podwire status --conflist conflist --json` in the
// node netns, as an operator on the node does, and returns its report.
func (n *node) podwireStatus(conflist string) cliapi.NodeStatus {
	n.t.Helper()
	out, err := exec.Command("nsenter", "--net="+n.ns.Path(), podwireBin, "status", "--conflist", conflist, "--json").Output()
	if err != nil {
		n.t.Fatalf("podwire status: %v\n%s", err, out)
	}
	var st cliapi.NodeStatus
	if err := json.Unmarshal(out, &st); err != nil {
		n.t.Fatalf("podwire status: %v\n%s", err, out)
	}
	return st
}

// podSpec says how a pod is created.
type podSpec struct {
	version   string
	namespace string // Kubernetes namespace; default "default"
	name      string
	// annotations are sent as the runtime capability; nil sends null
	// (a pod without annotations, as containerd does).
	annotations map[string]string
	// noCapability leaves the capability out, as an old runtime would.
	noCapability bool
	podwire      map[string]any // extra podwire config keys
	// list replaces the harness's conflist (one read from a conf dir).
	list *libcni.NetworkConfigList
	uid  string // K8S_POD_UID; default random
}

// pod is one pod sandbox: its netns and CNI attachment.
type pod struct {
	n      *node
	ns     ns.NetNS
	list   *libcni.NetworkConfigList
	rt     *libcni.RuntimeConf
	result *current.Result
	// version is the cniVersion of the result as the runtime received it.
	version string
	v4, v6  netip.Addr
}

// args is what a CRI runtime sends for the pod.
func (s podSpec) args() cnitest.PodArgs {
	return cnitest.PodArgs{Namespace: s.namespace, Name: s.name, UID: s.uid, Annotations: s.annotations, NoCapability: s.noCapability}
}

// runtimeConf builds what a CRI runtime would send.
func (s podSpec) runtimeConf(netnsPath string) *libcni.RuntimeConf {
	return s.args().RuntimeConf(netnsPath)
}

// addPod creates a pod netns and runs ADD through the chain. On error the
// chain's DEL has run, the pod netns is removed and the error returned (for
// refusal tests). It never fails the test itself: tests run it in
// goroutines.
func (n *node) addPod(s podSpec) (*pod, error) {
	if s.version == "" {
		s.version = "1.1.0"
	}
	list := s.list
	if list == nil {
		var err error
		if list, err = n.chain(s.version, s.podwire).List(); err != nil {
			return nil, err
		}
	}
	sb, err := n.client().AddSandbox(list, s.args())
	if err != nil {
		return nil, err
	}
	p := &pod{n: n, ns: sb.NS, list: list, rt: sb.RT, result: sb.Result, version: sb.Version}
	p.v4, p.v6 = sb.Addrs()
	n.t.Cleanup(func() {
		_ = p.del()
		p.closeNS()
	})
	return p, nil
}

// mustAddPod is addPod that fails the test on error.
func (n *node) mustAddPod(s podSpec) *pod {
	n.t.Helper()
	p, err := n.addPod(s)
	if err != nil {
		n.t.Fatalf("ADD: %v\nlog:\n%s", err, n.log())
	}
	return p
}

func (p *pod) closeNS() {
	testns.Release(p.ns)
	p.ns = nil
}

// del runs DEL through the chain (libcni passes the cached prevResult; a
// second DEL finds no cache and sends none).
func (p *pod) del() error { return p.n.client().Del(p.list, p.rt) }

// delNoNetns runs DEL as a runtime's second DEL: no netns, no prevResult.
func (p *pod) delNoNetns() error { return p.n.client().DelNoNetns(p.list, p.rt) }

func (p *pod) check() error { return p.n.client().Check(p.list, p.rt) }

// gc runs GC for the list with the given valid attachments.
func (n *node) gc(list *libcni.NetworkConfigList, valid ...*pod) error {
	var rts []*libcni.RuntimeConf
	for _, p := range valid {
		rts = append(rts, p.rt)
	}
	return n.client().GC(list, rts...)
}

func (n *node) status(list *libcni.NetworkConfigList) error { return n.client().Status(list) }

// records returns the names of podwire's state records on the node.
func (n *node) records() []string {
	entries, _ := os.ReadDir(n.stateDir())
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

func (n *node) log() string {
	b, _ := os.ReadFile(n.logFile())
	return string(b)
}

// Shared with the other suites through integration/cnitest.
var (
	randHex = cnitest.RandHex
	// run executes a command in the calling thread's netns (inside ns.Do).
	run = cnitest.Run
	// cniCode returns the CNI error code of err, or 0.
	cniCode = cnitest.CNICode
	// eventually retries f for up to d (for kernel state that settles: DAD).
	eventually = cnitest.Eventually
)
