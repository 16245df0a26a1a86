package cnitest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/internal/testns"
)

// Node is a simulated Kubernetes node for one test: a netns, a directory of
// its own (libcni's cache, host-local's leases, podwire's state and log)
// and libcni, run inside the netns as the node's runtime runs it. The
// suites wrap it with their pods.
type Node struct {
	// NS is the node's netns. It is released when the test ends, and with
	// it every link, route and nftables table in it.
	NS ns.NetNS
	// Dir is the node's directory, removed when the test ends.
	Dir string
	// CNI is libcni with its cache in Dir. A test may replace it (other
	// plugin directories, an exec that fails on purpose).
	CNI *libcni.CNIConfig
	// Base is the conflist that Chain starts from: its name and the
	// primary (ptp's pools, routes, MTU and ipMasq, or PrimaryEntry). A
	// test may change it before its pods are added.
	Base Chain

	t testing.TB
}

// NodeOptions say how NewNode makes a node.
type NodeOptions struct {
	// PluginDirs are where libcni finds the plugins; default Plugins().
	PluginDirs []string
	// Sysctls are set in the node netns, e.g. RouterSysctls.
	Sysctls [][2]string
	// Base is the node's Base.
	Base Chain
}

// NewNode makes a node netns (testns.New: t is skipped without root) and a
// directory, both removed when t ends; when t has failed by then, it logs
// podwire's log file. Test goroutine only.
func NewNode(t testing.TB, opts NodeOptions) *Node {
	t.Helper()
	dirs := opts.PluginDirs
	if dirs == nil {
		dirs = Plugins()
	}
	// The directory first: it is removed after the netns is released.
	dir := t.TempDir()
	n := &Node{NS: testns.New(t), Dir: dir, Base: opts.Base, t: t}
	n.CNI = libcni.NewCNIConfigWithCacheDir(dirs, filepath.Join(n.Dir, "cache"), nil)
	if err := Sysctls(n.NS, opts.Sysctls...); err != nil {
		t.Fatalf("node: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("podwire log:\n%s", n.Log())
		}
	})
	return n
}

// StateDir is podwire's stateDir on the node.
func (n *Node) StateDir() string { return filepath.Join(n.Dir, "state") }

// LogFile is podwire's logFile on the node.
func (n *Node) LogFile() string { return filepath.Join(n.Dir, "podwire.log") }

// Log is the content of LogFile ("" before podwire wrote it).
func (n *Node) Log() string {
	b, _ := os.ReadFile(n.LogFile())
	return string(b)
}

// Client is the node's runtime: n.CNI inside the node netns.
func (n *Node) Client() *Client { return &Client{NS: n.NS, CNI: n.CNI} }

// Do runs f inside the node netns and fails the test on an error. Test
// goroutine only.
func (n *Node) Do(f func() error) {
	n.t.Helper()
	if err := n.NS.Do(func(ns.NetNS) error { return f() }); err != nil {
		n.t.Fatal(err)
	}
}

// Chain is Base for spec version, with host-local's leases in Dir (unless
// Base names a directory) and podwire chained after the primary with the
// node's stateDir and logFile and the extra keys podwire.
func (n *Node) Chain(version string, podwire map[string]any) Chain {
	c := n.Base
	c.Version = version
	if c.IPAMDir == "" {
		c.IPAMDir = filepath.Join(n.Dir, "ipam")
	}
	c.Plugins = []map[string]any{PodwireEntry(n.StateDir(), n.LogFile(), podwire)}
	return c
}

// Pod is a pod sandbox on a Node (its netns, runtime config and result)
// with the list it was added through.
type Pod struct {
	Sandbox
	List *libcni.NetworkConfigList
	node *Node
}

// AddPod makes a pod netns and runs ADD through list for args
// (Client.AddSandbox): on an error ADD's DEL has run, the netns is released
// and the error returned. When the test ends the pod is deleted (DEL) and
// its netns released. It never fails the test itself, so tests may call it
// from goroutines and report after Wait.
func (n *Node) AddPod(list *libcni.NetworkConfigList, args PodArgs) (*Pod, error) {
	sb, err := n.Client().AddSandbox(list, args)
	if err != nil {
		return nil, err
	}
	p := &Pod{Sandbox: *sb, List: list, node: n}
	n.t.Cleanup(func() {
		_ = p.Del()
		p.ReleaseNS()
	})
	return p, nil
}

// ReleaseNS releases the pod's netns before the test ends, as when a
// sandbox is gone (a crashed runtime, a pod deleted without DEL).
func (p *Pod) ReleaseNS() {
	testns.Release(p.NS)
	p.NS = nil
}

// Del runs DEL through the pod's list (libcni sends the cached prevResult;
// a second DEL finds no cache and sends none).
func (p *Pod) Del() error { return p.node.Client().Del(p.List, p.RT) }

// DelNoNetns runs DEL as a runtime's second DEL: no netns, no prevResult.
func (p *Pod) DelNoNetns() error { return p.node.Client().DelNoNetns(p.List, p.RT) }

// Check runs CHECK through the pod's list.
func (p *Pod) Check() error { return p.node.Client().Check(p.List, p.RT) }

// CheckLast runs CHECK of the list's last plugin alone (Client.CheckLast).
func (p *Pod) CheckLast() error { return p.node.Client().CheckLast(p.List, p.RT) }

// GC runs GC through list with the valid pods' attachments.
func (n *Node) GC(list *libcni.NetworkConfigList, valid ...*Pod) error {
	var rts []*libcni.RuntimeConf
	for _, p := range valid {
		rts = append(rts, p.RT)
	}
	return n.Client().GC(list, rts...)
}
