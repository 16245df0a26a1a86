package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/metadata/fake"

	"github.com/podwire/podwire/pkg/agent"
)

// TestAgentSocketHandover is a surge rollout on one node (maxSurge 1,
// maxUnavailable 0): agent A serves the plugin, agent B starts on the same
// stateDir and serves, A stops. A pod created after A's stop still gets
// its annotations, from B: a stopping agent does not unlink the socket
// path its successor bound. The agents are the real pkg/agent, in the
// node's netns, and the plugin runs through libcni.
func TestAgentSocketHandover(t *testing.T) {
	n := newNode(t)
	const uid1, uid2 = "6f1c2a52-0000-4000-8000-0000000000a1", "6f1c2a52-0000-4000-8000-0000000000a2"
	objs := []runtime.Object{knode("worker-1", nil),
		kpod("nf-agent", "before", uid1, map[string]string{"podwire.io/forwarding": "true"}),
		kpod("nf-agent", "after", uid2, map[string]string{"podwire.io/forwarding": "true"})}
	confDir := filepath.Join(n.Dir, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-primary.conflist"), n.primaryList("0.3.1", nil), 0o644); err != nil {
		t.Fatal(err)
	}
	// run starts one agent (no health or metrics port: two share the
	// node's netns) and waits until it is ready.
	run := func(name string) (stop func()) {
		scheme := fake.NewTestScheme()
		if err := metav1.AddMetaToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		a := agent.New(agent.Config{
			Node: "worker-1", StateDir: n.StateDir(), Timing: agent.Timing{Interval: time.Second}, Version: name,
			Chain: agent.Chain{ConfDir: confDir, BinDir: filepath.Join(n.Dir, "bin"), Plugin: podwireBin, Mode: agent.ModeAuto},
		}, fake.NewSimpleMetadataClient(scheme, objs...), nil, slog.New(slog.NewTextHandler(&testLog{t: t}, nil)).With("agent", name))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.NS.Do(func(ns.NetNS) error { return a.Run(ctx) }) }()
		stop = func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent %s: %v", name, err)
			}
		}
		if err := eventually(10*time.Second, func() error {
			if st := a.Status(); !st.Ready {
				return fmt.Errorf("agent %s not ready: %+v", name, st)
			}
			return nil
		}); err != nil {
			stop()
			t.Fatal(err)
		}
		return stop
	}

	stopA := run("A")
	if _, err := n.addPodNoCapability("nf-agent", "before", uid1, fwdConfig); err != nil {
		t.Fatalf("ADD with agent A: %v\nlog:\n%s", err, n.Log())
	}
	stopB := run("B")
	defer stopB()
	stopA()
	if _, err := n.addPodNoCapability("nf-agent", "after", uid2, fwdConfig); err != nil {
		t.Fatalf("ADD after A stopped, with B serving: %v\nlog:\n%s", err, n.Log())
	}
}
