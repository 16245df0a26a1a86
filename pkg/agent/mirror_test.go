package agent

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// mirrorFixture is a ClusterNodes over a fake clientset's Nodes and a fake
// dynamic client's PodwireNodes, with this node "a" writing its own
// PodwireNode, and counts of the source's Node GETs from the watch cache
// and from etcd.
type mirrorFixture struct {
	cs                  *fake.Clientset
	dyn                 *dynamicfake.FakeDynamicClient
	c                   *ClusterNodes
	cacheGets, etcdGets atomic.Int32
	// cacheLags makes the watch cache answer NotFound, as it does for a
	// Node created a moment ago.
	cacheLags atomic.Bool
	// hideFromList is a Node's name the LIST leaves out, as a snapshot
	// taken before its creation does.
	hideFromList atomic.Value
}

func newMirrorFixture(t *testing.T, ctx context.Context, relist time.Duration, nodes ...*corev1.Node) *mirrorFixture {
	t.Helper()
	objs := make([]runtime.Object, len(nodes))
	for i, n := range nodes {
		objs[i] = n
	}
	f := &mirrorFixture{cs: fake.NewClientset(objs...)}
	f.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{PodwireNodeResource: "PodwireNodeList"})
	nodesAPI := f.cs.CoreV1().Nodes()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	src := &nodeSource{relist: relist, log: log, listOnly: true,
		list: func(ctx context.Context, o metav1.ListOptions) (*corev1.NodeList, error) {
			l, err := nodesAPI.List(ctx, o)
			if hide, _ := f.hideFromList.Load().(string); err == nil && hide != "" {
				l.Items = slices.DeleteFunc(l.Items, func(n corev1.Node) bool { return n.Name == hide })
			}
			return l, err
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			t.Error("the Nodes were watched")
			return nodesAPI.Watch(ctx, o)
		},
		get: func(ctx context.Context, name string, fromCache bool) (*corev1.Node, error) {
			if fromCache {
				f.cacheGets.Add(1)
				if f.cacheLags.Load() {
					return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
				}
			} else {
				f.etcdGets.Add(1)
			}
			return nodesAPI.Get(ctx, name, metav1.GetOptions{})
		},
	}
	src.mirrors = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return f.dyn.Resource(PodwireNodeResource).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return f.dyn.Resource(PodwireNodeResource).Watch(ctx, o)
		},
	}, f.dyn), &unstructured.Unstructured{}, 0, cache.Indexers{})
	src.follow()
	f.c = newClusterNodes(src, t.TempDir(), 0)
	f.c.source = src
	src.cached, src.synced, src.names = f.c.node, f.c.Synced, f.c.informer.GetStore().ListKeys
	own := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", "a").String()
			return nodesAPI.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", "a").String()
			return nodesAPI.Watch(ctx, o)
		},
	}, f.cs)
	f.c.publisher = newMirrorPublisher(own, f.dyn, "a", src, log)
	go f.c.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), f.c.Synced, src.mirrors.HasSynced) {
		t.Fatal("not synced")
	}
	return f
}

// writeMirror writes the PodwireNode of name as that node's agent would,
// with d as its spec.
func (f *mirrorFixture) writeMirror(t *testing.T, ctx context.Context, name string, d nodeData) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"fingerprint": d.fingerprint()}}}
	u.SetAPIVersion(podwireNodeAPIVersion)
	u.SetKind(podwireNodeKind)
	u.SetName(name)
	r := f.dyn.Resource(PodwireNodeResource)
	if _, err := r.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		if _, err := r.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *mirrorFixture) updateNode(t *testing.T, ctx context.Context, name string, mut func(*corev1.Node)) {
	t.Helper()
	n, err := f.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mut(n)
	if _, err := f.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func routesOf(n *corev1.Node) string {
	if n == nil {
		return "(no node)"
	}
	return n.Annotations[NodeRoutesAnnotation]
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

// TestNodeSourceFollowsMirrors: after its first LIST the cache reads a
// Node only when its PodwireNode differs from the cache, and then takes
// the Node's data, not the mirror's: a Node written with no mirror changed
// stays as cached, a mirror that matches costs no GET, and a forged mirror
// costs one GET and changes nothing.
func TestNodeSourceFollowsMirrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := testNode("a", "10.244.0.0/24", "10.99.0.11", "")
	b := testNode("b", "10.244.1.0/24", "10.99.0.12", "198.51.100.0/25")
	f := newMirrorFixture(t, ctx, time.Hour, a, b)
	f.writeMirror(t, ctx, "b", dataOf(b))
	time.Sleep(200 * time.Millisecond)
	if g := f.cacheGets.Load() + f.etcdGets.Load(); g != 0 {
		t.Errorf("a mirror that matches the cache cost %d Node GETs", g)
	}

	// Node b's annotation changes; its agent has not mirrored it yet.
	f.updateNode(t, ctx, "b", func(n *corev1.Node) { n.Annotations[NodeRoutesAnnotation] = "198.51.100.128/25" })
	time.Sleep(300 * time.Millisecond)
	if got := routesOf(f.c.node("b")); got != "198.51.100.0/25" {
		t.Fatalf("the cache followed a Node write that no mirror announced: b routes %q", got)
	}
	// Its agent mirrors it: the cache reads Node b.
	b2, _ := f.cs.CoreV1().Nodes().Get(ctx, "b", metav1.GetOptions{})
	f.writeMirror(t, ctx, "b", dataOf(b2))
	waitUntil(t, "the mirrored change in the cache", func() bool { return routesOf(f.c.node("b")) == "198.51.100.128/25" })
	if c, e := f.cacheGets.Load(), f.etcdGets.Load(); c != 1 || e != 0 {
		t.Errorf("%d Node GETs from the watch cache and %d from etcd for one mirrored change, want 1 and 0", c, e)
	}

	// A forged mirror: what it says differs from the cache, so the cache
	// reads Node b again, from the watch cache, then, since that does not
	// match the mirror either, from etcd; and keeps the Node's data.
	forged := dataOf(b2)
	def := "0.0.0.0/0"
	forged.Routes = &def
	forged.PodCIDRs = []string{"0.0.0.0/1"}
	f.writeMirror(t, ctx, "b", forged)
	waitUntil(t, "the forged mirror's GETs", func() bool { return f.etcdGets.Load() == 1 })
	time.Sleep(200 * time.Millisecond)
	if n := f.c.node("b"); routesOf(n) != "198.51.100.128/25" || n.Spec.PodCIDRs[0] != "10.244.1.0/24" {
		t.Errorf("a forged mirror reached the cache: %v %q", n.Spec.PodCIDRs, routesOf(n))
	}
	if c, e := f.cacheGets.Load(), f.etcdGets.Load(); c != 2 || e != 1 {
		t.Errorf("%d Node GETs from the watch cache and %d from etcd after the forged mirror, want 2 and 1", c, e)
	}

	// Node b deleted, and its mirror with it (the garbage collector, as
	// its owner): the mirror's deletion announces it.
	if err := f.cs.CoreV1().Nodes().Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.dyn.Resource(PodwireNodeResource).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "node b gone from the cache", func() bool { return f.c.node("b") == nil })
}

// TestNodeSourceRelist: a Node no mirror announces (a node without an
// agent) reaches the cache at the periodic LIST, read again from etcd,
// and a Node deleted leaves it at the next one; a cached Node the LIST
// misses but etcd holds (created after the LIST's snapshot) stays.
func TestNodeSourceRelist(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newMirrorFixture(t, ctx, 300*time.Millisecond, testNode("a", "10.244.0.0/24", "10.99.0.11", ""))
	if _, err := f.cs.CoreV1().Nodes().Create(ctx, testNode("c", "10.244.2.0/24", "10.99.0.13", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "node c, unannounced, in the cache", func() bool { return f.c.node("c") != nil })
	if err := f.cs.CoreV1().Nodes().Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "node c gone from the cache", func() bool { return f.c.node("c") == nil })

}

// TestNodeSourceCacheLags: a Node the cache does not hold (most often one
// created a moment ago, which the apiserver's watch cache may not hold
// yet) is read from etcd; a cached Node the watch cache answers NotFound
// for is read from etcd too, not taken as gone.
func TestNodeSourceCacheLags(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newMirrorFixture(t, ctx, time.Hour, testNode("a", "10.244.0.0/24", "10.99.0.11", ""))
	f.cacheLags.Store(true)
	e := testNode("e", "10.244.4.0/24", "10.99.0.15", "198.51.100.0/25")
	if _, err := f.cs.CoreV1().Nodes().Create(ctx, e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.writeMirror(t, ctx, "e", dataOf(e))
	waitUntil(t, "node e in the cache", func() bool { return routesOf(f.c.node("e")) == "198.51.100.0/25" })
	if c, e := f.cacheGets.Load(), f.etcdGets.Load(); c != 0 || e != 1 {
		t.Errorf("a new Node: %d GETs from the watch cache and %d from etcd, want 0 and 1", c, e)
	}
	e2, _ := f.cs.CoreV1().Nodes().Get(ctx, "e", metav1.GetOptions{})
	e2.Annotations[NodeRoutesAnnotation] = "198.51.100.128/25"
	if _, err := f.cs.CoreV1().Nodes().Update(ctx, e2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.writeMirror(t, ctx, "e", dataOf(e2))
	waitUntil(t, "node e's change in the cache", func() bool { return routesOf(f.c.node("e")) == "198.51.100.128/25" })
	if c, e := f.cacheGets.Load(), f.etcdGets.Load(); c != 1 || e != 2 {
		t.Errorf("a cached Node the watch cache lacks: %d GETs from the watch cache and %d from etcd in all, want 1 and 2", c, e)
	}
}

// TestMirrorPublisher: the agent writes its own Node's data into its
// PodwireNode's fingerprint, owned by the Node, and again when the Node changes; a
// PodwireNode changed by anyone else is put back.
func TestMirrorPublisher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := testNode("a", "10.244.0.0/24", "10.99.0.11", "")
	a.UID = "uid-a"
	f := newMirrorFixture(t, ctx, time.Hour, a)
	r := f.dyn.Resource(PodwireNodeResource)
	mirrorOf := func() (string, *unstructured.Unstructured) {
		u, err := r.Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			return "", nil
		}
		return mirrorFingerprint(u), u
	}
	waitUntil(t, "a's PodwireNode", func() bool { fp, _ := mirrorOf(); return fp == dataOf(a).fingerprint() })
	_, u := mirrorOf()
	if refs := u.GetOwnerReferences(); len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != "uid-a" {
		t.Errorf("owner references %+v, want Node a's", refs)
	}
	f.updateNode(t, ctx, "a", func(n *corev1.Node) { n.Annotations = map[string]string{NodeRoutesAnnotation: "198.51.100.0/25"} })
	a2, _ := f.cs.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{})
	if dataOf(a2).fingerprint() == dataOf(a).fingerprint() {
		t.Fatal("the fingerprint does not cover the routes")
	}
	waitUntil(t, "the routes in a's PodwireNode", func() bool { fp, _ := mirrorOf(); return fp == dataOf(a2).fingerprint() })
	f.writeMirror(t, ctx, "a", nodeData{PodCIDRs: []string{"0.0.0.0/0"}})
	waitUntil(t, "a's PodwireNode put back", func() bool { fp, _ := mirrorOf(); return fp == dataOf(a2).fingerprint() })
}
