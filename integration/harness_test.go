// Package integration runs the built podwire binary through libcni, chained
// after the reference ptp + host-local plugins, inside throwaway network
// namespaces: a "node" netns per test and a netns per pod. Nothing here
// touches the host's own netns, links, ruleset or sysctls.
//
// Environment: PODWIRE_BIN (the podwire binary) and PODWIRE_CNI_BIN (a
// directory with ptp and host-local v1.9.1), as set by `make test-integration`.
package integration

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/netlinksafe"

	"github.com/podwire/podwire/integration/cnitest"
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

// node is a simulated Kubernetes node (cnitest.Node: a netns with
// forwarding on, a directory of its own, libcni) whose chain is ptp +
// host-local, dual stack, then podwire.
type node struct {
	*cnitest.Node
	t testing.TB
}

// newNode makes a node; the test's cleanup removes its netns and, with it,
// every link, route and nftables table in it.
func newNode(t testing.TB) *node {
	t.Helper()
	return &node{t: t, Node: cnitest.NewNode(t, cnitest.NodeOptions{
		PluginDirs: []string{filepath.Dir(podwireBin), cniBinDir},
		Sysctls:    cnitest.RouterSysctls,
		Base: cnitest.Chain{Name: "podwire-test", V4Pool: "10.244.1.0/24", V6Pool: "fd00:244:1::/64",
			DefaultRoutes: true, MTU: 1500},
	})}
}

// linkCount is the number of links in the node's netns.
func (n *node) linkCount() int {
	var c int
	n.Do(func() error {
		links, err := netlinksafe.LinkList()
		c = len(links)
		return err
	})
	return c
}

// conflist is chain parsed by libcni (test goroutine only: fatal on error).
func (n *node) conflist(version string, podwire map[string]any) *libcni.NetworkConfigList {
	n.t.Helper()
	l, err := n.Chain(version, podwire).List()
	if err != nil {
		n.t.Fatal(err)
	}
	return l
}

// writeConflist writes n's chain for version (podwire with the extra keys)
// as the node's conflist file, for the CLI (`podwire status`, `repair`), and
// returns its path.
func (n *node) writeConflist(version string, podwire map[string]any) string {
	n.t.Helper()
	raw, err := n.Chain(version, podwire).Bytes()
	if err != nil {
		n.t.Fatal(err)
	}
	path := filepath.Join(n.Dir, "10-primary.conflist")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		n.t.Fatal(err)
	}
	return path
}

// podwireStatus runs `podwire status --conflist conflist --json` in the
// node netns, as an operator on the node does, and returns its report.
func (n *node) podwireStatus(conflist string) cliapi.NodeStatus {
	n.t.Helper()
	st, _, err := cnitest.RunStatus(exec.Command("nsenter", "--net="+n.NS.Path(), podwireBin, "status", "--conflist", conflist, "--json"))
	if err != nil {
		n.t.Fatal(err)
	}
	return *st
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

// pod is one pod sandbox on n (cnitest.Pod) with its first IPv4 and IPv6
// address.
type pod struct {
	*cnitest.Pod
	n      *node
	v4, v6 netip.Addr
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
		if list, err = n.Chain(s.version, s.podwire).List(); err != nil {
			return nil, err
		}
	}
	cp, err := n.AddPod(list, s.args())
	if err != nil {
		return nil, err
	}
	p := &pod{Pod: cp, n: n}
	p.v4, p.v6 = cp.Addrs()
	return p, nil
}

// mustAddPod is addPod that fails the test on error.
func (n *node) mustAddPod(s podSpec) *pod {
	n.t.Helper()
	p, err := n.addPod(s)
	if err != nil {
		n.t.Fatalf("ADD: %v\nlog:\n%s", err, n.Log())
	}
	return p
}

// gc runs GC for the list with the given valid attachments.
func (n *node) gc(list *libcni.NetworkConfigList, valid ...*pod) error {
	var rts []*libcni.RuntimeConf
	for _, p := range valid {
		rts = append(rts, p.RT)
	}
	return n.Client().GC(list, rts...)
}

func (n *node) status(list *libcni.NetworkConfigList) error { return n.Client().Status(list) }

// records returns the names of podwire's state records on the node.
func (n *node) records() []string {
	entries, _ := os.ReadDir(n.StateDir())
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

// mustRecords stops the test unless the node holds want attachment
// records; when names the step ("after DEL").
func (n *node) mustRecords(t *testing.T, want int, when string) {
	t.Helper()
	if got := n.records(); len(got) != want {
		t.Fatalf("records %s: %v, want %d", when, got, want)
	}
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
