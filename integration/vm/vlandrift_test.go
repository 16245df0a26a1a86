package vm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakecorev1 "k8s.io/client-go/kubernetes/typed/core/v1/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/podwire/podwire/pkg/agent"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// nodeEvents are the Events an agent under test created.
type nodeEvents struct {
	mu     sync.Mutex
	events []*corev1.Event
}

func (e *nodeEvents) reasons() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.events {
		out = append(out, ev.Reason)
	}
	return out
}

// startAgent runs podwire's node agent on n (its stateDir, a conf dir with
// n's chain, the VM's podwire binary) with a drift tick of a minute, so
// that what it repairs within seconds it repairs from the kernel's
// notifications; API objects from fakes, Events captured.
func startAgent(t *testing.T, n *node) *nodeEvents {
	t.Helper()
	confDir, binDir := filepath.Join(n.Dir, "net.d"), filepath.Join(n.Dir, "bin")
	for _, d := range []string{confDir, binDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	list, err := n.Chain("1.0.0", n.podwire).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-ptp.conflist"), list, 0o644); err != nil {
		t.Fatal(err)
	}
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	md := metadatafake.NewSimpleMetadataClient(scheme, &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "vm-node", UID: "vm-node-uid"},
	})
	ev := &nodeEvents{}
	core := &fakecorev1.FakeCoreV1{Fake: &clienttesting.Fake{}}
	core.AddReactor("create", "events", func(a clienttesting.Action) (bool, runtime.Object, error) {
		e := a.(clienttesting.CreateAction).GetObject().(*corev1.Event)
		ev.mu.Lock()
		ev.events = append(ev.events, e)
		ev.mu.Unlock()
		return true, e, nil
	})
	a := agent.New(agent.Config{
		Node: "vm-node", StateDir: n.StateDir(), Timing: agent.Timing{Interval: time.Minute},
		Chain: agent.Chain{ConfDir: confDir, BinDir: binDir, Plugin: filepath.Join(pluginDirs(t)[0], "podwire"), Mode: agent.ModeAuto},
	}, md, core, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.NS.Do(func(ns.NetNS) error { return a.Run(ctx) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !a.Status().Ready {
		if time.Now().After(deadline) {
			t.Fatalf("agent not ready after 30 s: %+v", a.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ev
}

// TestVLANDriftRepairedByAgent: a VLAN pod reaches the far end on VLAN 100;
// then its bridge port loses VLAN 100, and later the uplink is taken off
// the bridge. Each time the agent, whose drift tick is a minute away,
// restores the wiring within 2 s from the kernel's link notifications,
// records a PodwireVLANRepaired Event on the Node, and the pod reaches the
// far end again.
func TestVLANDriftRepairedByAgent(t *testing.T) {
	require(t, capVLANFiltering, capVLAN8021Q)
	n := newNode(t, vlanConf(nil))
	addFarVLAN100(t, n)
	a := n.mustAddPod(map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.1/24"})
	mustPing(t, a.NS, "the far end before any drift", "192.0.2.100")
	events := startAgent(t, n)
	recs, err := state.New(n.StateDir()).List()
	if err != nil || len(recs) != 1 || recs[0].VLAN == nil {
		t.Fatalf("records %v (%v), want the VLAN pod's", recs, err)
	}
	port := recs[0].VLAN.HostVeth

	drifts := []struct {
		what  string
		drift func() error
		fixed func() error
	}{
		{"VLAN 100 removed from the pod's bridge port " + port, func() error {
			l, err := netlinksafe.LinkByName(port)
			if err != nil {
				return err
			}
			return netlink.BridgeVlanDel(l, 100, true, true, false, true)
		}, func() error {
			l, err := netlinksafe.LinkByName(port)
			if err != nil {
				return err
			}
			v, err := vlanbridge.ListPortVLANs(l.Attrs().Index)
			if err != nil || v.PVID != 100 {
				return fmt.Errorf("port %s has PVID %d (%v)", port, v.PVID, err)
			}
			return nil
		}},
		{"the uplink taken off the bridge", func() error {
			l, err := netlinksafe.LinkByName("uplink0")
			if err != nil {
				return err
			}
			return netlink.LinkSetNoMaster(l)
		}, func() error {
			l, err := netlinksafe.LinkByName("uplink0")
			if err != nil {
				return err
			}
			br, err := netlinksafe.LinkByName("podwire0")
			if err != nil || l.Attrs().MasterIndex != br.Attrs().Index {
				return fmt.Errorf("uplink0 is not on podwire0 (%v)", err)
			}
			v, err := vlanbridge.ListPortVLANs(l.Attrs().Index)
			if err != nil || !slices.Contains(v.Tagged, 100) {
				return fmt.Errorf("uplink0 carries %v tagged (%v), want VLAN 100", v.Tagged, err)
			}
			return nil
		}},
	}
	for i, d := range drifts {
		n.Do(d.drift)
		start := time.Now()
		var err error
		check := func() error { return n.NS.Do(func(ns.NetNS) error { return d.fixed() }) }
		for err = check(); err != nil && time.Since(start) < 2*time.Second; err = check() {
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s: not repaired within 2 s: %v", d.what, err)
		}
		t.Logf("%s: repaired after %v", d.what, time.Since(start).Round(time.Millisecond))
		mustPing(t, a.NS, "the far end after the repair", "192.0.2.100")
		want := i + 1
		deadline := time.Now().Add(2 * time.Second)
		for count(events.reasons(), agent.ReasonVLANRepaired) < want && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if got := count(events.reasons(), agent.ReasonVLANRepaired); got < want {
			t.Fatalf("%s: %d %s Events on the Node, want %d (events %v)", d.what, got, agent.ReasonVLANRepaired, want, events.reasons())
		}
	}
}

func count(ss []string, s string) int {
	k := 0
	for _, x := range ss {
		if x == s {
			k++
		}
	}
	return k
}
