package agent

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// TestTaintReRegistered: a Node deleted and registered again (a new UID,
// the startup taint back on it, as the kubelet's --register-with-taints
// makes it) loses the taint again at the agent's next sync, and so does a
// Node whose taint was put back by hand; an unchanged Node is not read
// again. With the agent's memory of its last patch alone, the taint
// stayed on the new Node until the agent restarted.
func TestTaintReRegistered(t *testing.T) {
	const key = DefaultStartupTaint
	node := func(uid, rv string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: ktypes.UID(uid), ResourceVersion: rv},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: key, Effect: corev1.TaintEffectNoSchedule}}}}
	}
	meta := func(n *corev1.Node) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: n.ObjectMeta}
	}
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	first := node("u1", "10")
	md := metadatafake.NewSimpleMetadataClient(scheme, meta(first))
	cs := fake.NewClientset(first)
	gets := 0
	cs.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) { gets++; return false, nil, nil })
	a := New(Config{Node: "n1", StateDir: t.TempDir(), Taint: Taint{Key: key, Nodes: cs.CoreV1()}}, md, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.api.pods.Run(ctx)
	go a.api.ns.Run(ctx)
	go a.api.node.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), a.api.pods.Synced, a.api.ns.Synced, a.api.node.Synced) {
		t.Fatal("informers not synced")
	}
	// Ready: in the chain, the tables verified.
	a.st.status.Conflist, a.st.tablesVerified = "/etc/cni/net.d/10-x.conflist", true
	tainted := func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range n.Spec.Taints {
			if tt.Key == key {
				return true
			}
		}
		return false
	}
	// nodeSeen waits for the Node informer to hold resourceVersion rv.
	nodeSeen := func(rv string) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if m := a.api.node.meta(); m != nil && m.ResourceVersion == rv {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("the Node informer never saw resourceVersion %s", rv)
			}
		}
	}
	mustPass(t, a.reconcileTaint(ctx))
	if tainted() {
		t.Fatal("the startup taint stays on a Ready node")
	}
	// The informer delivers the patched Node: nothing to read again.
	patched, _ := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err := md.Tracker().Update(nodesResource, meta(patched), ""); err != nil {
		t.Fatal(err)
	}
	nodeSeen(patched.ResourceVersion)
	before := gets
	mustPass(t, a.reconcileTaint(ctx))
	if gets != before {
		t.Errorf("an unchanged Node read %d more times", gets-before)
	}

	// The Node is deleted and the kubelet registers it again.
	again := node("u2", "20")
	for _, err := range []error{
		cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("nodes"), "", "n1"),
		cs.Tracker().Add(again),
		md.Tracker().Delete(nodesResource, "", "n1"),
		md.Tracker().Add(meta(again)),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	nodeSeen("20")
	mustPass(t, a.reconcileTaint(ctx))
	if tainted() {
		t.Error("the re-registered Node keeps the startup taint")
	}

	// The taint put back by hand on the same Node.
	n, _ := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
	n.ResourceVersion = "30"
	if err := cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
		t.Fatal(err)
	}
	if err := md.Tracker().Update(nodesResource, meta(n), ""); err != nil {
		t.Fatal(err)
	}
	nodeSeen("30")
	mustPass(t, a.reconcileTaint(ctx))
	if tainted() {
		t.Error("the startup taint put back by hand stays on a Ready node")
	}
}
