// Package integration runs the built podwire binary through libcni, chained
// after the reference ptp + host-local plugins, inside throwaway network
// namespaces: a "node" netns per test and a netns per pod. Nothing here
// touches the host's own netns, links, ruleset or sysctls.
//
// Environment: PODWIRE_BIN (the podwire binary) and PODWIRE_CNI_BIN (a
// directory with ptp and host-local v1.9.1), as set by `make test-integration`.
package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"golang.org/x/sys/unix"
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
	podwireBin = envPath("PODWIRE_BIN", "../bin/podwire")
	cniBinDir = envPath("PODWIRE_CNI_BIN", "../.cache/cni-bin")
	for _, p := range []string{podwireBin, filepath.Join(cniBinDir, "ptp"), filepath.Join(cniBinDir, "host-local")} {
		if _, err := os.Stat(p); err != nil {
			fmt.Fprintf(os.Stderr, "missing %s: run `make build tools` (or `make test-integration`)\n", p)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func envPath(key, def string) string {
	p := os.Getenv(key)
	if p == "" {
		p = def
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return abs
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
	nodeNS, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("failed to create node netns: %v", err)
	}
	n := &node{t: t, ns: nodeNS, dir: t.TempDir(), v4Pool: "10.244.1.0/24", v6Pool: "fd00:244:1::/64"}
	t.Cleanup(func() { releaseNS(nodeNS) })
	n.cni = libcni.NewCNIConfigWithCacheDir(
		[]string{filepath.Dir(podwireBin), cniBinDir}, filepath.Join(n.dir, "cache"), nil)
	n.do(func() error {
		for _, kv := range [][2]string{
			{"net.ipv4.ip_forward", "1"},
			{"net.ipv6.conf.all.forwarding", "1"},
			{"net.ipv4.conf.all.rp_filter", "0"},
			{"net.ipv4.conf.default.rp_filter", "0"},
			{"net.ipv6.conf.default.accept_dad", "0"}, // test speed: no DAD wait
		} {
			if _, err := sysctl.Sysctl(kv[0], kv[1]); err != nil {
				return fmt.Errorf("node sysctl %s: %w", kv[0], err)
			}
		}
		return run("ip", "link", "set", "lo", "up")
	})
	return n
}

// do runs f inside the node netns (fatal on error).
func (n *node) do(f func() error) {
	n.t.Helper()
	if err := n.ns.Do(func(ns.NetNS) error { return f() }); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) stateDir() string { return filepath.Join(n.dir, "state") }
func (n *node) logFile() string  { return filepath.Join(n.dir, "podwire.log") }

// conflist is ptp + host-local (dual stack) then podwire with the given
// extra keys, for one spec version.
func (n *node) conflist(version string, podwire map[string]any) *libcni.NetworkConfigList {
	n.t.Helper()
	pw := map[string]any{
		"type":         "podwire",
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true},
		"stateDir":     n.stateDir(),
		"logFile":      n.logFile(),
	}
	for k, v := range podwire {
		pw[k] = v
	}
	first := n.primary
	if first == nil {
		first = map[string]any{
			"type":   "ptp",
			"ipMasq": n.ptpIPMasq,
			"mtu":    1500,
			"ipam": map[string]any{
				"type":    "host-local",
				"dataDir": filepath.Join(n.dir, "ipam"),
				"ranges": []any{
					[]any{map[string]string{"subnet": n.v4Pool}},
					[]any{map[string]string{"subnet": n.v6Pool}},
				},
				"routes": []any{map[string]string{"dst": "0.0.0.0/0"}, map[string]string{"dst": "::/0"}},
			},
		}
	}
	list := map[string]any{
		"cniVersion": version,
		"name":       "podwire-test",
		"plugins":    []any{first, pw},
	}
	b, err := json.Marshal(list)
	if err != nil {
		n.t.Fatal(err)
	}
	l, err := libcni.ConfListFromBytes(b)
	if err != nil {
		n.t.Fatalf("conflist: %v", err)
	}
	return l
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

// runtimeConf builds what a CRI runtime would send.
func (s podSpec) runtimeConf(netnsPath string) *libcni.RuntimeConf {
	ns, name := s.namespace, s.name
	if ns == "" {
		ns = "default"
	}
	if name == "" {
		name = "pod-" + randHex(4)
	}
	rt := &libcni.RuntimeConf{
		ContainerID: randHex(32),
		NetNS:       netnsPath,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", ns},
			{"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", "x"},
			{"K8S_POD_UID", randHex(8)},
		},
	}
	if !s.noCapability {
		var ann any
		if s.annotations != nil {
			ann = s.annotations
		}
		rt.CapabilityArgs = map[string]any{"io.kubernetes.cri.pod-annotations": ann}
	}
	return rt
}

// addPod creates a pod netns and runs ADD through the chain. On error the
// pod netns is removed and the error returned (for refusal tests).
func (n *node) addPod(s podSpec) (*pod, error) {
	n.t.Helper()
	if s.version == "" {
		s.version = "1.1.0"
	}
	podNS, err := testutils.NewNS()
	if err != nil {
		n.t.Fatalf("failed to create pod netns: %v", err)
	}
	p := &pod{n: n, ns: podNS, list: n.conflist(s.version, s.podwire), rt: s.runtimeConf(podNS.Path())}
	// Test speed only: no IPv6 duplicate address detection in the pod, so
	// ptp does not wait a second for addresses to settle.
	if err := podNS.Do(func(ns.NetNS) error {
		_, err := sysctl.Sysctl("net.ipv6.conf.default.accept_dad", "0")
		return err
	}); err != nil {
		n.t.Fatal(err)
	}
	var res types.Result
	err = n.ns.Do(func(ns.NetNS) error {
		var err error
		res, err = n.cni.AddNetworkList(context.Background(), p.list, p.rt)
		return err
	})
	if err != nil {
		// As a runtime does after a failed ADD: DEL, so that ptp and
		// host-local release what they made.
		_ = p.del()
		p.closeNS()
		return nil, err
	}
	p.version = res.Version()
	if p.result, err = current.NewResultFromResult(res); err != nil {
		n.t.Fatalf("result: %v", err)
	}
	for _, ip := range p.result.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		if a.Unmap().Is4() {
			p.v4 = a.Unmap()
		} else {
			p.v6 = a
		}
	}
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
	if p.ns != nil {
		releaseNS(p.ns)
		p.ns = nil
	}
}

// del runs DEL through the chain (libcni passes the cached prevResult; a
// second DEL finds no cache and sends none).
func (p *pod) del() error {
	return p.n.ns.Do(func(ns.NetNS) error {
		return p.n.cni.DelNetworkList(context.Background(), p.list, p.rt)
	})
}

// delNoNetns runs DEL as a runtime's second DEL: no netns, no prevResult.
func (p *pod) delNoNetns() error {
	rt := *p.rt
	rt.NetNS = ""
	return p.n.ns.Do(func(ns.NetNS) error {
		return p.n.cni.DelNetworkList(context.Background(), p.list, &rt)
	})
}

func (p *pod) check() error {
	return p.n.ns.Do(func(ns.NetNS) error {
		return p.n.cni.CheckNetworkList(context.Background(), p.list, p.rt)
	})
}

// gc runs GC for the list with the given valid attachments.
func (n *node) gc(list *libcni.NetworkConfigList, valid ...*pod) error {
	args := &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}
	for _, p := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: p.rt.ContainerID, IfName: p.rt.IfName})
	}
	return n.ns.Do(func(ns.NetNS) error {
		return n.cni.GCNetworkList(context.Background(), list, args)
	})
}

func (n *node) status(list *libcni.NetworkConfigList) error {
	return n.ns.Do(func(ns.NetNS) error {
		return n.cni.GetStatusNetworkList(context.Background(), list)
	})
}

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

func randHex(nbytes int) string {
	b := make([]byte, nbytes)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// run executes a command in the calling thread's netns (inside ns.Do).
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// cniCode returns the CNI error code of err, or 0.
func cniCode(err error) uint {
	var te *types.Error
	if !errors.As(err, &te) {
		return 0
	}
	return te.Code
}

// eventually retries f for up to d (for kernel state that settles: DAD).
func eventually(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// releaseNS closes a netns made by testutils.NewNS and removes its bind
// mount. Under parallel ADDs a plain unmount can fail with EBUSY while
// another goroutine's new netns mount propagates through the shared
// /var/run/netns; a lazy unmount (MNT_DETACH) then still removes it, so no
// test leaves a netns behind.
func releaseNS(n ns.NetNS) {
	n.Close()
	if err := testutils.UnmountNS(n); err != nil {
		_ = unix.Unmount(n.Path(), unix.MNT_DETACH)
		_ = os.Remove(n.Path())
	}
}
