package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// PodwireNodeResource is the PodwireNode custom resource (cluster-scoped,
// the chart's CRD, one per node, named after it): the fingerprint of what
// podwire reads of its Node (spec.podCIDRs, the InternalIP addresses and
// NodeRoutesAnnotation: nodeData.fingerprint), written by that node's
// agent when they change.
//
// It exists so that no agent watches every Node. A Node is written by its
// kubelet at every status report (every nodeStatusReportFrequency, 5
// minutes by default, and at every condition's change) and by the
// controllers, and the apiserver has no filter that would spare a watcher
// the writes of fields it does not read: an agent watching every Node
// decodes every Node's every write, so its cost at rest grows with the
// node count times the Nodes' write rate. PodwireNodes change only when
// what podwire reads does.
//
// A PodwireNode carries no authority: it is a signal. An agent that sees
// its fingerprint differ from its cache's reads that Node (a GET) and uses
// the Node's data, written by the controllers (podCIDRs) and by that
// node's kubelet (addresses, under NodeRestriction); so a mirror forged by
// root on one node, who holds that agent's token, makes the other agents
// read that Node once, no more. Nodes that run no agent, and any change a mirror
// missed, reach the cache through a paginated LIST of the Nodes at
// mirrorRelist's period.
var PodwireNodeResource = schema.GroupVersionResource{Group: "podwire.io", Version: "v1alpha1", Resource: "podwirenodes"}

const (
	podwireNodeKind       = "PodwireNode"
	podwireNodeAPIVersion = "podwire.io/v1alpha1"
)

// nodeData is what podwire reads of a Node: the pod CIDRs, the InternalIP
// addresses and NodeRoutesAnnotation (nil when the Node has none).
type nodeData struct {
	PodCIDRs    []string `json:"podCIDRs"`
	InternalIPs []string `json:"internalIPs"`
	Routes      *string  `json:"routes"`
}

// dataOf is the data of a slim Node (slimNode).
func dataOf(n *corev1.Node) nodeData {
	d := nodeData{PodCIDRs: n.Spec.PodCIDRs}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			d.InternalIPs = append(d.InternalIPs, a.Address)
		}
	}
	if v, ok := n.Annotations[NodeRoutesAnnotation]; ok {
		d.Routes = &v
	}
	return d
}

// fingerprint is what a PodwireNode's spec.fingerprint holds of d:
// "sha256:" and the hex SHA-256 of d's JSON encoding (the fields in their
// declared order, absent lists as null). A digest rather than a copy, so
// that a mirror's size is bounded whatever a Node holds (a kubelet may
// write thousands of prefixes into its annotation: Accepted refuses them,
// after reading them from the Node).
func (d nodeData) fingerprint() string {
	if len(d.PodCIDRs) == 0 {
		d.PodCIDRs = nil
	}
	if len(d.InternalIPs) == 0 {
		d.InternalIPs = nil
	}
	b, _ := json.Marshal(d)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// NodeFingerprint is what Node n's PodwireNode holds in spec.fingerprint
// (nodeData.fingerprint): what a node's agent writes, and what a bench
// writes for a node without one.
func NodeFingerprint(n *corev1.Node) string {
	slim, _ := slimNode(n)
	return dataOf(slim.(*corev1.Node)).fingerprint()
}

// mirrorFingerprint is a PodwireNode's spec.fingerprint, "" when absent.
func mirrorFingerprint(u *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedString(u.Object, "spec", "fingerprint")
	return v
}

// slimMirror is the PodwireNode informer's transform: name,
// resourceVersion and spec.
func slimMirror(o any) (any, error) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return o, nil // a tombstone
	}
	s := &unstructured.Unstructured{Object: map[string]any{}}
	s.SetName(u.GetName())
	s.SetResourceVersion(u.GetResourceVersion())
	if spec, ok := u.Object["spec"]; ok {
		s.Object["spec"] = spec
	}
	return s, nil
}

// mirrorRelist is the period, jittered by a quarter either way, of the
// paginated LIST of every Node that brings the Nodes no mirror announces
// (those of nodes without an agent, a change whose mirror was lost) into
// the cache.
const mirrorRelist = 10 * time.Minute

// mirrorListPage is the Nodes per page of that LIST: the agent holds one
// page of whole Nodes at a time.
const mirrorListPage = 500

// nodeSource is the ClusterNodes informer's ListerWatcher. Its LIST and its
// first watch's initial events (a watch-list stream) read the Nodes
// themselves; once the initial events have ended, the watch stops reading
// Nodes and delivers instead the Node of each PodwireNode that differs
// from the cache, read by a GET, and at mirrorRelist the Nodes that differ
// from the cache in a paginated LIST (and a Deleted event for each cached
// Node that is gone).
type nodeSource struct {
	list  func(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// get reads the Node called name: from the apiserver's watch cache
	// when cached (resourceVersion "0", which may lag a write by a
	// moment), else from etcd.
	get func(ctx context.Context, name string, cached bool) (*corev1.Node, error)
	// mirrors follows the PodwireNodes.
	mirrors cache.SharedIndexInformer
	// cached is the slim Node in the cache called name, nil when none;
	// names lists the cache's keys; synced reports whether the cache has
	// been filled once.
	cached func(name string) *corev1.Node
	names  func() []string
	synced func() bool
	relist time.Duration
	log    *slog.Logger
	// listOnly: the Node client answers no watch-list stream (a test's
	// fake), so the reflector LISTs first.
	listOnly bool

	queue nameQueue
	// lastRV is the last resourceVersion delivered, which a Deleted
	// event carries so that the reflector's next watch starts there.
	mu     sync.Mutex
	lastRV string
}

// newNodeSource builds the ListerWatcher over core (a protobuf client of
// core/v1, ProtobufConfig) and the PodwireNodes of dyn.
func newNodeSource(core rest.Interface, dyn dynamic.Interface, relist time.Duration, log *slog.Logger) *nodeSource {
	codec := runtime.NewParameterCodec(scheme.Scheme)
	s := &nodeSource{relist: relist, log: log}
	s.list = func(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
		out := &corev1.NodeList{}
		err := core.Get().Resource("nodes").VersionedParams(&opts, codec).Do(ctx).Into(out)
		return out, err
	}
	s.watch = func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.Watch = true
		return core.Get().Resource("nodes").VersionedParams(&opts, codec).Watch(ctx)
	}
	s.get = func(ctx context.Context, name string, cached bool) (*corev1.Node, error) {
		out := &corev1.Node{}
		opts := metav1.GetOptions{}
		if cached {
			opts.ResourceVersion = "0"
		}
		err := core.Get().Resource("nodes").Name(name).VersionedParams(&opts, codec).Do(ctx).Into(out)
		return out, err
	}
	s.mirrors = dynamicinformer.NewFilteredDynamicInformer(dyn, PodwireNodeResource, "", 0, cache.Indexers{}, nil).Informer()
	s.follow()
	return s
}

// follow queues the name of each PodwireNode added, changed or deleted.
func (s *nodeSource) follow() {
	_ = s.mirrors.SetTransform(slimMirror)
	name := func(o any) string {
		if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		if u, ok := o.(*unstructured.Unstructured); ok {
			return u.GetName()
		}
		return ""
	}
	_, _ = s.mirrors.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { s.queue.add(name(o)) },
		UpdateFunc: func(o, n any) {
			if a, b := o.(*unstructured.Unstructured), n.(*unstructured.Unstructured); a == nil || b == nil || mirrorFingerprint(a) != mirrorFingerprint(b) {
				s.queue.add(name(n))
			}
		},
		DeleteFunc: func(o any) { s.queue.add(name(o)) },
	})
}

// mirror is the cached PodwireNode called name, nil when none.
func (s *nodeSource) mirror(name string) *unstructured.Unstructured {
	o, ok, _ := s.mirrors.GetStore().GetByKey(name)
	if !ok {
		return nil
	}
	u, _ := o.(*unstructured.Unstructured)
	return u
}

// ListWithContext lists the Nodes.
func (s *nodeSource) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	l, err := s.list(ctx, opts)
	if err != nil {
		return nil, err
	}
	s.seen(l.ResourceVersion)
	return l, nil
}

// IsWatchListSemanticsUnSupported tells the reflector whether to LIST
// rather than ask for a watch-list stream.
func (s *nodeSource) IsWatchListSemanticsUnSupported() bool { return s.listOnly }

// List and Watch are the context-free forms cache.ListerWatcher still
// requires; the reflector calls the WithContext ones.
func (s *nodeSource) List(opts metav1.ListOptions) (runtime.Object, error) {
	return s.ListWithContext(context.Background(), opts)
}

func (s *nodeSource) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return s.WatchWithContext(context.Background(), opts)
}

// WatchWithContext watches the Nodes for the initial events of a
// watch-list request, then follows the PodwireNodes (nodeSource).
func (s *nodeSource) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w := &triggerWatch{ch: make(chan watch.Event), done: make(chan struct{})}
	var nodes watch.Interface
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		var err error
		if nodes, err = s.watch(ctx, opts); err != nil {
			return nil, err
		}
	}
	go s.run(ctx, w, nodes)
	return w, nil
}

// triggerWatch is the watch.Interface nodeSource returns.
type triggerWatch struct {
	ch   chan watch.Event
	done chan struct{}
	once sync.Once
}

func (w *triggerWatch) ResultChan() <-chan watch.Event { return w.ch }
func (w *triggerWatch) Stop()                          { w.once.Do(func() { close(w.done) }) }

// send delivers ev unless the watch was stopped or ctx ended.
func (w *triggerWatch) send(ctx context.Context, ev watch.Event) bool {
	select {
	case w.ch <- ev:
		return true
	case <-w.done:
	case <-ctx.Done():
	}
	return false
}

func (s *nodeSource) seen(rv string) {
	if rv != "" {
		s.mu.Lock()
		s.lastRV = rv
		s.mu.Unlock()
	}
}

func (s *nodeSource) rv() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastRV
}

// run feeds w: the initial events of nodes, when not nil, up to and with
// the bookmark that ends them; then the Nodes the PodwireNodes announce
// and the periodic LIST finds changed.
func (s *nodeSource) run(ctx context.Context, w *triggerWatch, nodes watch.Interface) {
	defer close(w.ch)
	if nodes != nil {
		if !s.initialEvents(ctx, w, nodes) {
			return
		}
	}
	for !s.synced() {
		select {
		case <-w.done:
			return
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	relist := time.NewTimer(jitter(s.relist))
	defer relist.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-ctx.Done():
			return
		case <-s.queue.ready():
			names := s.queue.take()
			for len(names) > 0 {
				chunk := names[:min(len(names), refreshChunk)]
				evs := s.parallel(ctx, chunk, s.refresh)
				for i, ev := range evs {
					if ev != nil && !w.send(ctx, *ev) {
						for _, n := range names[i:] {
							s.queue.add(n) // for the next watch
						}
						return
					}
				}
				names = names[len(chunk):]
			}
		case <-relist.C:
			if !s.relistNodes(ctx, w) {
				return
			}
			relist.Reset(jitter(s.relist))
		}
	}
}

// initialEvents forwards nodes' events up to and with the bookmark that
// ends a watch-list request's initial events, and stops nodes; false when
// the watch ended before.
func (s *nodeSource) initialEvents(ctx context.Context, w *triggerWatch, nodes watch.Interface) bool {
	defer nodes.Stop()
	for {
		select {
		case <-w.done:
			return false
		case <-ctx.Done():
			return false
		case ev, ok := <-nodes.ResultChan():
			if !ok || !w.send(ctx, ev) || ev.Type == watch.Error {
				return false
			}
			if m, err := metaOf(ev.Object); err == nil {
				s.seen(m.GetResourceVersion())
				if ev.Type == watch.Bookmark && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					return true
				}
			}
		}
	}
}

func metaOf(o runtime.Object) (metav1.Object, error) {
	if n, ok := o.(*corev1.Node); ok {
		return n, nil
	}
	return nil, fmt.Errorf("not a Node: %T", o)
}

// refreshChunk is the most names the watch reads at once, and
// refreshWorkers the GETs it has in flight (parallel): a fleet joining announces
// thousands of Nodes together, and one GET at a time would wait out the
// apiserver's latency thousands of times.
const (
	refreshChunk   = 256
	refreshWorkers = 8
)

// parallel is f of each of names, refreshWorkers at a time, in names'
// order: nil where there is nothing to deliver.
func (s *nodeSource) parallel(ctx context.Context, names []string, f func(context.Context, string) (watch.Event, bool)) []*watch.Event {
	out := make([]*watch.Event, len(names))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(refreshWorkers, len(names)) {
		wg.Go(func() {
			for i := range next {
				if ev, ok := f(ctx, names[i]); ok {
					out[i] = &ev
				}
			}
		})
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// refresh is the event that brings the cache's Node called name up to
// date after its PodwireNode changed, and false when the cache holds the
// mirror's data already. The Node is read from the apiserver's watch
// cache, which costs the apiserver no etcd read: one GET per agent for
// each change, however many agents. When that read does not match the
// mirror (the watch cache a moment behind the write, or a forged mirror),
// or the watch cache does not hold it (a Node created a moment ago), it
// is read again from etcd, and that read is what the cache takes. A
// failed GET is tried again a second later.
func (s *nodeSource) refresh(ctx context.Context, name string) (watch.Event, bool) {
	if name == "" {
		return watch.Event{}, false
	}
	cached, m := s.cached(name), s.mirror(name)
	if m != nil && cached != nil && mirrorFingerprint(m) == dataOf(cached).fingerprint() {
		return watch.Event{}, false
	}
	// A Node not cached is most often one created a moment ago, which the
	// watch cache may not hold yet: it is read from etcd at once.
	n, err := s.get(ctx, name, cached != nil)
	switch {
	case apierrors.IsNotFound(err) && cached != nil:
		// The watch cache may not hold a Node deleted and created again.
		n, err = s.get(ctx, name, false)
	case err == nil && m != nil:
		if slim, _ := slimNode(n); dataOf(slim.(*corev1.Node)).fingerprint() != mirrorFingerprint(m) {
			n, err = s.get(ctx, name, false)
		}
	}
	ev, ok, err := s.deliver(cached, n, err)
	if err != nil {
		s.log.Warn("failed to read a Node its PodwireNode announced a change of; trying again", "node", name, "error", err)
		time.AfterFunc(time.Second, func() { s.queue.add(name) })
	}
	return ev, ok
}

// deliver is the event for a GET's answer (n, err) about a Node the cache
// holds as cached (nil when none): Modified with n; Deleted when the
// Node is gone and was cached, nothing when it was not. Any other error
// is returned, with nothing to deliver.
func (s *nodeSource) deliver(cached, n *corev1.Node, err error) (watch.Event, bool, error) {
	switch {
	case apierrors.IsNotFound(err):
		if cached == nil {
			return watch.Event{}, false, nil
		}
		gone := cached.DeepCopy()
		gone.ResourceVersion = s.rv()
		return watch.Event{Type: watch.Deleted, Object: gone}, true, nil
	case err != nil:
		return watch.Event{}, false, err
	}
	s.seen(n.ResourceVersion)
	return watch.Event{Type: watch.Modified, Object: n}, true, nil
}

// relistNodes lists every Node a page at a time and delivers, read again
// from etcd, each Node whose data differs from the cache and each cached
// Node the LIST did not return (a Deleted event when it is gone); false
// when w stopped. The LIST is a snapshot and the cache may be newer: a
// Node created or changed after the snapshot, and announced by its
// PodwireNode meanwhile, must neither leave the cache nor go back to the
// snapshot's data, so the LIST only names the Nodes to read. A failed LIST
// is left for the next period.
func (s *nodeSource) relistNodes(ctx context.Context, w *triggerWatch) bool {
	listed := map[string]bool{}
	var suspects []string
	opts := metav1.ListOptions{Limit: mirrorListPage}
	for {
		l, err := s.list(ctx, opts)
		if err != nil {
			s.log.Warn("failed to list the Nodes; trying at the next period", "error", err)
			return true
		}
		for i := range l.Items {
			n := &l.Items[i]
			listed[n.Name] = true
			if c := s.cached(n.Name); c == nil {
				suspects = append(suspects, n.Name)
			} else if slim, _ := slimNode(n); !sameNodeData(slim, c) {
				suspects = append(suspects, n.Name)
			}
		}
		if opts.Continue = l.Continue; opts.Continue == "" {
			break
		}
	}
	for _, name := range s.names() {
		if !listed[name] {
			suspects = append(suspects, name)
		}
	}
	for _, ev := range s.parallel(ctx, suspects, s.reread) {
		if ev != nil && !w.send(ctx, *ev) {
			return false
		}
	}
	return true
}

// reread is the event that brings the cache's Node called name up to date
// with etcd, false when a failed GET leaves it as it is.
func (s *nodeSource) reread(ctx context.Context, name string) (watch.Event, bool) {
	n, err := s.get(ctx, name, false)
	ev, ok, err := s.deliver(s.cached(name), n, err)
	if err != nil {
		s.log.Warn("failed to read a Node the LIST found changed or gone; leaving it to the next period", "node", name, "error", err)
	}
	return ev, ok
}

// jitter is d shifted by up to a quarter of d either way, so that the
// agents of a cluster started together do not list together.
func jitter(d time.Duration) time.Duration {
	return d - d/4 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// nameQueue is a set of names to handle, and a channel that signals a
// non-empty set.
type nameQueue struct {
	mu     sync.Mutex
	names  map[string]struct{}
	notify chan struct{}
}

func (q *nameQueue) init() {
	if q.notify == nil {
		q.notify = make(chan struct{}, 1)
	}
}

func (q *nameQueue) add(name string) {
	q.mu.Lock()
	q.init()
	if q.names == nil {
		q.names = map[string]struct{}{}
	}
	q.names[name] = struct{}{}
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *nameQueue) ready() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.init()
	return q.notify
}

func (q *nameQueue) take() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]string, 0, len(q.names))
	for n := range q.names {
		out = append(out, n)
	}
	clear(q.names)
	slices.Sort(out)
	return out
}

// mirrorPublisher writes this node's PodwireNode: its Node's data
// (nodeData), read by a watch of that Node alone, whenever the
// PodwireNode does not hold it (created with the Node as its owner, so
// that the garbage collector removes it with the Node).
type mirrorPublisher struct {
	node    string
	own     cache.SharedIndexInformer
	mirrors dynamic.NamespaceableResourceInterface
	source  *nodeSource
	log     *slog.Logger
	kick    chan struct{}
}

// newMirrorPublisher builds the writer of node's PodwireNode; lw lists and
// watches that Node alone.
func newMirrorPublisher(lw cache.ListerWatcher, dyn dynamic.Interface, node string, source *nodeSource, log *slog.Logger) *mirrorPublisher {
	own := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	_ = own.SetTransform(slimNode)
	p := &mirrorPublisher{node: node, own: own, mirrors: dyn.Resource(PodwireNodeResource), source: source, log: log,
		kick: make(chan struct{}, 1)}
	_, _ = own.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.wake() },
		UpdateFunc: func(any, any) { p.wake() },
	})
	_, _ = source.mirrors.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(o any) bool {
			u, ok := o.(*unstructured.Unstructured)
			return !ok || u.GetName() == node
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { p.wake() },
			UpdateFunc: func(any, any) { p.wake() },
			DeleteFunc: func(any) { p.wake() },
		},
	})
	return p
}

func (p *mirrorPublisher) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// run writes the PodwireNode at each change of the Node or of the
// PodwireNode until ctx ends; a failed write is tried again after a
// backoff of up to a minute.
func (p *mirrorPublisher) run(ctx context.Context) {
	go p.own.Run(ctx.Done())
	whenKicked(ctx, p.kick, func(ctx context.Context) (time.Duration, error) {
		err := p.publish(ctx)
		if errors.Is(err, errNotListed) {
			return 200 * time.Millisecond, nil
		}
		if err != nil {
			p.log.Warn("failed to write this node's PodwireNode; trying again", "node", p.node, "error", err)
		}
		return 0, err
	})
}

// whenKicked runs do at each kick until ctx ends. A failure is tried again
// after a backoff of 1 s, doubling up to a minute, unless a kick comes
// first; do's again, when not zero, asks for another run after it with the
// backoff unchanged (what do needs is not there yet).
func whenKicked(ctx context.Context, kick <-chan struct{}, do func(context.Context) (again time.Duration, err error)) {
	backoff := time.Second
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-retry.C:
		}
		again, err := do(ctx)
		switch {
		case again > 0:
			retry.Reset(again)
		case err != nil:
			retry.Reset(backoff)
			backoff = min(2*backoff, time.Minute)
		default:
			backoff = time.Second
		}
	}
}

// errNotListed: the Node or the PodwireNodes have not been listed yet.
var errNotListed = errors.New("not listed yet")

// publish writes the PodwireNode when it does not hold the Node's data;
// errNotListed before both the Node and the PodwireNodes have been listed.
func (p *mirrorPublisher) publish(ctx context.Context) error {
	if !p.own.HasSynced() || !p.source.mirrors.HasSynced() {
		return errNotListed
	}
	o, ok, _ := p.own.GetStore().GetByKey(p.node)
	if !ok {
		return nil // no such Node: its creation wakes the writer
	}
	n := o.(*corev1.Node)
	want := dataOf(n)
	fp := want.fingerprint()
	have := p.source.mirror(p.node)
	if have != nil && mirrorFingerprint(have) == fp {
		return nil
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"fingerprint": fp}}}
	u.SetAPIVersion(podwireNodeAPIVersion)
	u.SetKind(podwireNodeKind)
	u.SetName(p.node)
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}})
	var err error
	if have == nil {
		_, err = p.mirrors.Create(ctx, u, metav1.CreateOptions{})
	} else {
		u.SetResourceVersion(have.GetResourceVersion())
		_, err = p.mirrors.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	p.log.Info("PodwireNode written", "node", p.node, "fingerprint", fp, "podCIDRs", want.PodCIDRs, "internalIPs", want.InternalIPs)
	return nil
}
