package integration

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/podwire/podwire/pkg/agent"
)

// TestStaleAttachmentCollected: a forwarding pod's sandbox is gone from
// the API while the runtime never ran its DEL (containerd never calls CNI
// GC): its record, node route and claim stay, and a new pod asking for the
// same route is refused (the control). While the API cannot confirm that
// the pod is gone, the agent postpones the collection, however long;
// once it can, the agent removes the attachment by the plugin's DEL: the
// record and the route go, a Node Event names the pod, and the new pod
// gets the route and the traffic to it. A running forwarding pod's record
// and route are never touched.
func TestStaleAttachmentCollected(t *testing.T) {
	const grace = 2 * time.Second
	n := newNode(t)
	staleNet, keptNet := netip.MustParsePrefix("198.51.100.0/25"), netip.MustParsePrefix("198.51.100.128/25")
	fwd := func(route string) map[string]string {
		return map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": route}
	}
	const staleUID, keptUID, newUID = "c0000000-0000-4000-8000-000000000001", "c0000000-0000-4000-8000-000000000002", "c0000000-0000-4000-8000-000000000003"
	ta := n.startAgentWith(func(c *agent.Config) { c.Timing.CollectGrace = grace },
		n.primaryList("1.1.0", nil), n.podwireEntry(fwdConfig), knode("worker-1", nil),
		kpod("nf-a", "stale", staleUID, fwd(staleNet.String())),
		kpod("nf-a", "kept", keptUID, fwd(keptNet.String())),
		kpod("nf-a", "new", newUID, fwd(staleNet.String())))
	stale, err := n.addPodNoCapability("nf-a", "stale", staleUID, fwdConfig)
	if err != nil {
		t.Fatalf("ADD of the pod that goes stale: %v\nlog:\n%s", err, n.Log())
	}
	kept, err := n.addPodNoCapability("nf-a", "kept", keptUID, fwdConfig)
	if err != nil {
		t.Fatalf("ADD of the running pod: %v\nlog:\n%s", err, n.Log())
	}
	routeVia := func(dst netip.Prefix) string {
		var via []string
		for _, r := range n.nodeRoutes(dst) {
			via = append(via, r.Gw.String())
		}
		return strings.Join(via, ",")
	}
	if routeVia(staleNet) != stale.v4.String() || routeVia(keptNet) != kept.v4.String() {
		t.Fatalf("routes after ADD: %s via %q, %s via %q", staleNet, routeVia(staleNet), keptNet, routeVia(keptNet))
	}

	// The API cannot answer a GET; then the stale pod leaves it (its
	// sandbox gone behind the runtime's back: no DEL).
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	apiDown := true
	ta.md.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if apiDown {
			return true, nil, errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
		}
		return false, nil, nil
	})
	if err := ta.md.Tracker().Delete(pods, "nf-a", "stale", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.addPodNoCapability("nf-a", "new", newUID, fwdConfig); err == nil || !strings.Contains(err.Error(), "nf-a/stale") {
		t.Fatalf("ADD of a pod asking for the stale pod's route: %v, want a refusal naming nf-a/stale (the stale claim)", err)
	}
	time.Sleep(5 * grace)
	n.mustRecords(t, 2, "while the API cannot confirm the pod is gone")
	if routeVia(staleNet) != stale.v4.String() {
		t.Fatalf("the stale pod's route went while the API was down: %q", routeVia(staleNet))
	}

	// The API answers: collected within a few ticks.
	apiDown = false
	start := time.Now()
	if err := eventually(15*time.Second, func() error {
		if got := n.records(); len(got) != 1 {
			return fmt.Errorf("records %v, want the running pod's alone", got)
		}
		if v := routeVia(staleNet); v != "" {
			return fmt.Errorf("%s still routed via %s", staleNet, v)
		}
		return nil
	}); err != nil {
		t.Fatalf("stale attachment not collected: %v\nlog:\n%s", err, n.Log())
	}
	t.Logf("collected %v after the API answered", time.Since(start).Round(100*time.Millisecond))
	// The Event follows the removal (the agent records it once the
	// plugin's DEL has returned).
	if err := eventually(5*time.Second, func() error {
		evs, err := ta.events.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == agent.ReasonAttachmentCollected && strings.Contains(e.Message, "nf-a/stale") && e.InvolvedObject.Kind == "Node" {
				return nil
			}
		}
		return fmt.Errorf("no %s Event on the Node naming nf-a/stale", agent.ReasonAttachmentCollected)
	}); err != nil {
		t.Error(err)
	}
	if routeVia(keptNet) != kept.v4.String() {
		t.Errorf("the running pod's route changed: %s via %q", keptNet, routeVia(keptNet))
	}

	// The claim is free: the new pod gets the route, and traffic to it.
	fresh, err := n.addPodNoCapability("nf-a", "new", newUID, fwdConfig)
	if err != nil {
		t.Fatalf("ADD of a pod asking for the collected route: %v\nlog:\n%s", err, n.Log())
	}
	behind := staleNet.Addr().Next().Next()
	if err := fresh.NS.Do(func(ns.NetNS) error { return run("ip", "addr", "add", behind.String()+"/32", "dev", "lo") }); err != nil {
		t.Fatal(err)
	}
	srv := listenTCP(t, fresh.NS, netip.AddrPortFrom(behind, 0).String())
	if err := eventually(5*time.Second, func() error {
		return dialTCP(n.NS, netip.Addr{}, netip.AddrPortFrom(behind, srv.port()), time.Second)
	}); err != nil {
		t.Fatalf("the node did not reach %s behind the new pod: %v", behind, err)
	}
}
