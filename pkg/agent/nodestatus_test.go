package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/podwire/podwire/pkg/nodestatus"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vrrp"
)

// statusAgent is an agent of node n1 whose reports go to a fake API, with
// its own Node (UID u1) in its cache.
func statusAgent(t *testing.T) (*Agent, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	fc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{NodeStatusResource: nodestatus.Kind + "List"})
	md := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	a := New(Config{Node: "n1", StateDir: t.TempDir(), Version: "v9", NodeStatus: fc.Resource(NodeStatusResource)},
		md, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := a.api.node.informer.GetStore().Add(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}}); err != nil {
		t.Fatal(err)
	}
	return a, fc
}

func putRecord(t *testing.T, dir string, r *state.Record) {
	t.Helper()
	r.Complete = true
	if err := state.New(dir).Put(r); err != nil {
		t.Fatal(err)
	}
}

// TestNodeStatusReport: the report counts the complete records only, sums
// the checked pods' drops, lists each pod with its gates (in order, whatever
// the order of stateDir), and the node's forwarded prefixes once each.
func TestNodeStatusReport(t *testing.T) {
	a, _ := statusAgent(t)
	dir := a.cfg.StateDir
	rt := netip.MustParsePrefix("198.51.100.0/24")
	putRecord(t, dir, &state.Record{ContainerID: "c3", IfName: "eth0", PodNamespace: "fw", PodName: "router", HostIfName: "veth3",
		Forwarding: true, Routes: []state.Route{{Dst: rt}, {Dst: rt}}})
	putRecord(t, dir, &state.Record{ContainerID: "c1", IfName: "eth0", PodNamespace: "a", PodName: "web", HostIfName: "veth1",
		SourceCheck: true, Addresses: []netip.Addr{netip.MustParseAddr("10.244.0.5")}})
	putRecord(t, dir, &state.Record{ContainerID: "c2", IfName: "net1", PodNamespace: "a", PodName: "vrrp", HostIfName: "veth2",
		SourceCheck: true, VLAN: &state.VLANAttachment{Tagged: []uint16{100, 101, 102}, PVID: 5, VRRP: []vrrp.Group{{VRID: 7}}}})
	putRecord(t, dir, &state.Record{ContainerID: "c4", IfName: "eth0", PodNamespace: "b", PodName: "odd", Unchecked: "no host veth"})
	if err := state.New(dir).Put(&state.Record{ContainerID: "c5", IfName: "eth0", PodNamespace: "b", PodName: "half"}); err != nil {
		t.Fatal(err)
	}
	rep := a.nodeStatus(func() (map[string]sourcecheck.Drops, error) {
		return map[string]sourcecheck.Drops{"veth1": {Packets: 3, Bytes: 300}, "veth2": {Packets: 4}}, nil
	})
	want := nodestatus.Counts{Wired: 4, Checked: 2, Forwarding: 1, Unchecked: 1, DroppedPackets: 7}
	if rep.Counts != want {
		t.Errorf("counts %+v, want %+v", rep.Counts, want)
	}
	var names []string
	for _, p := range rep.Pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if !slices.Equal(names, []string{"a/vrrp", "a/web", "b/odd", "fw/router"}) {
		t.Errorf("pods %v", names)
	}
	if p := rep.Pods[0]; p.VLAN != "trunk 100-102, native 5" || !slices.Equal(p.VRRP, []int{7}) || p.DroppedPackets != 4 {
		t.Errorf("VLAN pod %+v", p)
	}
	if !slices.Equal(rep.Routes, []string{rt.String()}) {
		t.Errorf("routes %v, want %v once", rep.Routes, rt)
	}
	if rep.Agent.Ready || rep.Agent.NotReady == "" || rep.Chain.InChain || rep.Chain.Reason == "" {
		t.Errorf("an agent that has synced nothing reports %+v %+v", rep.Agent, rep.Chain)
	}
	if len(rep.Problems()) == 0 {
		t.Error("no problem found in a report of an agent that is not Ready")
	}
}

// statusWrites counts the create and update requests on PodwireNodeStatuses.
func statusWrites(fc *dynamicfake.FakeDynamicClient) int {
	n := 0
	for _, a := range fc.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "update" {
			n++
		}
	}
	return n
}

// TestNodeStatusWrites: the first pass creates the node's report, owned by
// its Node; a pass with nothing new writes nothing, nor does a change of the
// drop counters alone; a refusal is written; a failed write stays pending
// and the next one reads the object again after a conflict.
func TestNodeStatusWrites(t *testing.T) {
	ctx := context.Background()
	a, fc := statusAgent(t)
	// pass runs the reconciler's pass and the writer's.
	pass := func() error {
		if err := a.reconcileStatus(ctx); err != nil {
			return err
		}
		return a.writeStatus(ctx)
	}
	putRecord(t, a.cfg.StateDir, &state.Record{ContainerID: "c1", IfName: "eth0", PodNamespace: "a", PodName: "web",
		HostIfName: "veth1", SourceCheck: true})
	if err := pass(); err != nil {
		t.Fatal(err)
	}
	u, err := fc.Resource(NodeStatusResource).Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o := u.GetOwnerReferences(); len(o) != 1 || o[0].Kind != "Node" || o[0].UID != "u1" {
		t.Errorf("owner references %+v", o)
	}
	if w, _, _ := unstructured.NestedFloat64(u.Object, "status", "counts", "wired"); w != 1 {
		t.Errorf("status.counts.wired %v, want 1", w)
	}
	if err := pass(); err != nil {
		t.Fatal(err)
	}
	if n := statusWrites(fc); n != 1 {
		t.Fatalf("%d writes after a pass with nothing new, want 1", n)
	}
	a.report.handed.Counts.DroppedPackets = 99 // as if the counters had moved since
	if err := pass(); err != nil || statusWrites(fc) != 1 {
		t.Fatalf("a change of the drop counters alone: %v, %d writes", err, statusWrites(fc))
	}
	a.noteRefusal("a", "bad", "forwarding-namespace", "not admitted")
	if err := pass(); err != nil || statusWrites(fc) != 2 {
		t.Fatalf("a refusal: %v, %d writes", err, statusWrites(fc))
	}
	u, _ = fc.Resource(NodeStatusResource).Get(ctx, "n1", metav1.GetOptions{})
	if r, _, _ := unstructured.NestedSlice(u.Object, "status", "refusals"); len(r) != 1 {
		t.Errorf("refusals %v", r)
	}

	fc.PrependReactor("update", nodestatus.Resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(NodeStatusResource.GroupResource(), "n1", errors.New("changed"))
	})
	a.noteRefusal("a", "bad2", "forwarding-namespace", "not admitted")
	if err := pass(); !apierrors.IsConflict(err) || a.report.exists || a.report.pending == nil {
		t.Fatalf("a conflict: %v; the resourceVersion read before kept %v, the report dropped %v", err, a.report.exists, a.report.pending == nil)
	}
	fc.ReactionChain = fc.ReactionChain[1:]
	if err := a.writeStatus(ctx); err != nil {
		t.Fatal(err)
	}
	u, _ = fc.Resource(NodeStatusResource).Get(ctx, "n1", metav1.GetOptions{})
	if r, _, _ := unstructured.NestedSlice(u.Object, "status", "refusals"); len(r) != 2 {
		t.Errorf("after the retry, refusals %v", r)
	}

	for range nodestatus.MaxRefusals + 3 {
		a.noteRefusal("a", "many", "bad-annotation", "x")
	}
	if n := len(a.report.refusals); n != nodestatus.MaxRefusals {
		t.Errorf("%d refusals kept, want %d", n, nodestatus.MaxRefusals)
	}
}
