package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/netlinksafe"

	"github.com/podwire/podwire/integration/cnitest"
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

// node is a simulated node (cnitest.Node) whose chain is ptp + host-local
// (IPv4 only, no default routes), then podwire with the node's keys
// (docs/configuration.md).
type node struct {
	*cnitest.Node
	t       testing.TB
	podwire map[string]any
}

func newNode(t testing.TB, podwire map[string]any) *node {
	t.Helper()
	return &node{t: t, podwire: podwire, Node: cnitest.NewNode(t, cnitest.NodeOptions{
		PluginDirs: pluginDirs(t),
		Base:       cnitest.Chain{Name: "podwire-vm", V4Pool: "10.244.1.0/24"},
	})}
}

// addPod makes a pod netns (removed with the test) and runs ADD with the
// annotations, for CNI spec version 1.1.0.
func (n *node) addPod(annotations map[string]string) (*cnitest.Pod, error) {
	return n.addPodArgs("1.1.0", cnitest.PodArgs{Annotations: annotations})
}

// addPodArgs is addPod for a spec version and what the runtime sends. A
// failed ADD is followed by DEL, as a runtime does, and the pod netns is
// released. It never fails the test itself: tests run it in goroutines.
func (n *node) addPodArgs(version string, args cnitest.PodArgs) (*cnitest.Pod, error) {
	list, err := n.Chain(version, n.podwire).List()
	if err != nil {
		return nil, err
	}
	return n.AddPod(list, args)
}

func (n *node) mustAddPod(annotations map[string]string) *cnitest.Pod {
	n.t.Helper()
	p, err := n.addPod(annotations)
	if err != nil {
		n.t.Fatalf("ADD %v: %v\nlog:\n%s", annotations, err, n.Log())
	}
	return p
}

// gc runs GC with valid as the valid attachments.
func (n *node) gc(valid ...*cnitest.Pod) error {
	list, err := n.Chain("1.1.0", n.podwire).List()
	if err != nil {
		return err
	}
	return n.GC(list, valid...)
}

// leftovers lists podwire's host veths in the node netns and its records.
func (n *node) leftovers() []string {
	var out []string
	n.Do(func() error {
		links, err := netlinksafe.LinkList()
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, "pwv") {
				out = append(out, "link "+l.Attrs().Name)
			}
		}
		return err
	})
	entries, _ := os.ReadDir(n.StateDir())
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			out = append(out, "record "+e.Name())
		}
	}
	return out
}

// cniCode is the CNI error code of err (libcni wraps it), or 0.
var cniCode = cnitest.CNICode
