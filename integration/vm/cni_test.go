package vm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
)

// The VM suite's CNI client, a lean twin of integration/harness_test.go
// (test files of another package cannot be imported): podwire through
// libcni, chained after ptp + host-local, with a node netns per test.

// pluginDirs are where libcni finds podwire, ptp and host-local: the
// initramfs's /opt/cni/bin in the VM, else PODWIRE_BIN's directory and
// PODWIRE_CNI_BIN (as `make test-integration` sets them).
func pluginDirs(t *testing.T) []string {
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
	for _, p := range []string{"podwire", "ptp", "host-local"} {
		found := false
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, p)); err == nil {
				found = true
			}
		}
		if !found {
			msg := fmt.Sprintf("plugin %s not found in %v (set PODWIRE_BIN and PODWIRE_CNI_BIN)", p, dirs)
			if inVM() {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return dirs
}

// node is a simulated node: its netns, CNI cache, IPAM data and podwire state.
type node struct {
	t   *testing.T
	ns  ns.NetNS
	dir string
	cni *libcni.CNIConfig
	// podwire is the node's podwire config (keys of DESIGN.md).
	podwire map[string]any
}

func newNode(t *testing.T, podwire map[string]any) *node {
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

// conflist is ptp + host-local then podwire with the node's keys.
func (n *node) conflist(version string) *libcni.NetworkConfigList {
	n.t.Helper()
	pw := map[string]any{
		"type":         "podwire",
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true},
		"stateDir":     n.stateDir(),
		"logFile":      n.logFile(),
	}
	for k, v := range n.podwire {
		pw[k] = v
	}
	list := map[string]any{
		"cniVersion": version,
		"name":       "podwire-vm",
		"plugins": []any{
			map[string]any{
				"type": "ptp",
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": filepath.Join(n.dir, "ipam"),
					"ranges":  []any{[]any{map[string]string{"subnet": "10.244.1.0/24"}}},
				},
			},
			pw,
		},
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

func (n *node) addPodVersion(version string, annotations map[string]string) (*pod, error) {
	p := &pod{n: n, ns: newNS(n.t), list: n.conflist(version)}
	p.rt = &libcni.RuntimeConf{
		ContainerID: randHex(32),
		NetNS:       p.ns.Path(),
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", "pod-" + randHex(4)},
			{"K8S_POD_UID", randHex(8)},
		},
		CapabilityArgs: map[string]any{"io.kubernetes.cri.pod-annotations": annotations},
	}
	var res types.Result
	err := n.ns.Do(func(ns.NetNS) error {
		var err error
		res, err = n.cni.AddNetworkList(context.Background(), p.list, p.rt)
		return err
	})
	if err != nil {
		return nil, err
	}
	if p.result, err = current.NewResultFromResult(res); err != nil {
		n.t.Fatalf("result: %v", err)
	}
	n.t.Cleanup(func() { _ = p.del() })
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

func (p *pod) del() error {
	return p.n.ns.Do(func(ns.NetNS) error {
		return p.n.cni.DelNetworkList(context.Background(), p.list, p.rt)
	})
}

// delNoNetns runs DEL as a runtime's second DEL: no netns.
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

// checkPodwire runs CHECK of podwire alone (a list of the same name, so
// libcni sends the cached result as prevResult). ptp v1.9.1's CHECK looks
// for every IP of the result on its own interface, so it refuses a result
// that carries static VLAN IPs on net1: that is ptp's limit, not ours.
func (p *pod) checkPodwire() error {
	only := *p.list
	only.Plugins = p.list.Plugins[len(p.list.Plugins)-1:]
	return p.n.ns.Do(func(ns.NetNS) error {
		return p.n.cni.CheckNetworkList(context.Background(), &only, p.rt)
	})
}

// gc runs GC with valid as the valid attachments.
func (n *node) gc(valid ...*pod) error {
	args := &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}
	for _, p := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: p.rt.ContainerID, IfName: p.rt.IfName})
	}
	return n.ns.Do(func(ns.NetNS) error {
		return n.cni.GCNetworkList(context.Background(), n.conflist("1.1.0"), args)
	})
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
func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
