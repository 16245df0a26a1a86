package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/podwire/podwire/pkg/nodetables"
)

// ClusterNodes caches every Node of the cluster for the ranges the egress
// table excepts (nodetables.Cluster): spec.podCIDRs, the InternalIP
// addresses and the prefixes each node's forwarding pods serve
// (NodeRoutesAnnotation, which routes.go also routes to). It reads the
// Nodes once, then only those a PodwireNode announces changed and, at a
// long period, a paginated LIST (nodeSource; PodwireNodeResource says
// why it does not watch them): its client speaks protobuf
// (ProtobufConfig), and a transform keeps nothing of a Node but its name
// and those fields, so the cache costs a few hundred bytes per node
// whatever the Nodes weigh. What a pass computes from it is kept until the
// cache changes (Accepted, nodeRanges). It also writes this node's
// PodwireNode (mirrorPublisher). RBAC: get, list and watch nodes; get,
// list, watch, create and update podwirenodes.
//
// What a Node publishes is written by whoever may patch that Node (its
// kubelet, under NodeRestriction, annotates and addresses its own Node),
// so it is bounded where it is read (Accepted) before it becomes a route
// or an egress exception on any node.
type ClusterNodes struct {
	stateDir string
	informer cache.SharedIndexInformer
	// source is the informer's ListerWatcher and publisher this node's
	// PodwireNode writer; nil in tests that fill the cache by hand.
	source    *nodeSource
	publisher *mirrorPublisher
	// gen counts the changes of the cache that Accepted depends on,
	// bumped by the informer's handlers, which then call changed.
	gen     atomic.Uint64
	changed atomic.Pointer[func()]

	mu       sync.Mutex
	accepted acceptedCache
	ranges   rangesCache
}

// rangesCache is the every-Node part of Ranges (pod CIDRs and node IPs,
// sorted and without duplicates) and the generation it was computed at:
// the egress reconciler asks for it at every pass, and only a change of
// the Nodes' data changes it.
type rangesCache struct {
	valid             bool
	gen               uint64
	nodes             int
	podCIDRs, nodeIPs []netip.Prefix
}

// acceptedCache is Accepted's last answer and what it was computed from.
type acceptedCache struct {
	valid      bool
	gen        uint64
	self       string
	bounds     []netip.Prefix
	boundsErr  string
	publishing bool
	prefixes   []NodePrefix
	refused    []string
}

// NewClusterNodes builds the cache over core, a REST client of the core/v1
// API group (the typed CoreV1 client's RESTClient(), built from
// ProtobufConfig), and the PodwireNodes of dyn; self is this node, whose
// PodwireNode it writes. Run starts it.
func NewClusterNodes(core rest.Interface, dyn dynamic.Interface, self, stateDir string, resync time.Duration, log *slog.Logger) *ClusterNodes {
	src := newNodeSource(core, dyn, mirrorRelist, log)
	c := newClusterNodes(src, stateDir, resync)
	c.source = src
	src.cached = c.node
	src.synced = c.Synced
	src.names = c.informer.GetStore().ListKeys
	own := cache.NewListWatchFromClient(core, "nodes", metav1.NamespaceAll, fields.OneTermEqualSelector("metadata.name", self))
	c.publisher = newMirrorPublisher(own, dyn, self, src, log)
	return c
}

// ProtobufConfig is a copy of cfg whose clients ask for and send
// Kubernetes' protobuf encoding (application/vnd.kubernetes.protobuf), JSON
// accepted as a fallback. The Node reads are the ones that cannot be
// metadata-only (podCIDRs are in the spec, the addresses in the status):
// the first read of every Node, the periodic LIST and the GETs come whole,
// and in protobuf each costs the apiserver, the wire and the agent's
// decoding about half of JSON's bytes and a fraction of its CPU. Custom
// resources (ClaimPool, PodwireNode) have no protobuf encoding: their
// clients keep cfg.
func ProtobufConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

func newClusterNodes(lw cache.ListerWatcher, stateDir string, resync time.Duration) *ClusterNodes {
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, resync, cache.Indexers{})
	_ = inf.SetTransform(slimNode)
	c := &ClusterNodes{stateDir: stateDir, informer: inf}
	// Only a change of what podwire reads counts: a Node's status is
	// updated by its kubelet every few minutes, and a resync delivers
	// every Node again unchanged.
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.bump() },
		UpdateFunc: func(o, n any) {
			if !sameNodeData(o, n) {
				c.bump()
			}
		},
		DeleteFunc: func(any) { c.bump() },
	})
	return c
}

// bump counts a change of what podwire reads, and tells onChange's f.
func (c *ClusterNodes) bump() {
	c.gen.Add(1)
	if f := c.changed.Load(); f != nil {
		(*f)()
	}
}

// onChange makes f (which must not block) called after each change of what
// podwire reads of the Nodes.
func (c *ClusterNodes) onChange(f func()) { c.changed.Store(&f) }

// slimNode is the informer's transform: a Node's name, NodeRoutesAnnotation,
// pod CIDRs and InternalIP addresses, nothing else.
func slimNode(o any) (any, error) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return o, nil // a tombstone
	}
	slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}}
	if v, ok := n.Annotations[NodeRoutesAnnotation]; ok {
		slim.Annotations = map[string]string{NodeRoutesAnnotation: v}
	}
	slim.Spec.PodCIDRs = n.Spec.PodCIDRs
	if len(slim.Spec.PodCIDRs) == 0 && n.Spec.PodCIDR != "" {
		slim.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			slim.Status.Addresses = append(slim.Status.Addresses, a)
		}
	}
	return slim, nil
}

// sameNodeData reports whether two slim Nodes hold the same data.
func sameNodeData(o, n any) bool {
	a, ok1 := o.(*corev1.Node)
	b, ok2 := n.(*corev1.Node)
	if !ok1 || !ok2 {
		return false
	}
	av, aok := a.Annotations[NodeRoutesAnnotation]
	bv, bok := b.Annotations[NodeRoutesAnnotation]
	return a.Name == b.Name && av == bv && aok == bok &&
		slices.Equal(a.Spec.PodCIDRs, b.Spec.PodCIDRs) && slices.Equal(a.Status.Addresses, b.Status.Addresses)
}

// Run runs the cache, the PodwireNode informer and this node's
// PodwireNode writer until ctx ends.
func (c *ClusterNodes) Run(ctx context.Context) {
	if c.source != nil {
		go c.source.mirrors.Run(ctx.Done())
		go c.publisher.run(ctx)
	}
	c.informer.Run(ctx.Done())
}

// Synced reports whether the informer has listed the Nodes once.
func (c *ClusterNodes) Synced() bool { return c.informer.HasSynced() }

// nodes is the cached Nodes, by name.
func (c *ClusterNodes) nodes() []*corev1.Node {
	out := c.anyOrder()
	slices.SortFunc(out, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// anyOrder is the cached Nodes in the store's order, for what sorts its
// own results.
func (c *ClusterNodes) anyOrder() []*corev1.Node {
	objs := c.informer.GetStore().List()
	out := make([]*corev1.Node, 0, len(objs))
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			out = append(out, n)
		}
	}
	return out
}

// Ranges is what the egress table excepts for the cluster, as the cache
// holds it now: every Node's pod CIDRs and node IPs (what does not parse
// is skipped: the apiserver validates both), and as Routes the prefixes
// the other Nodes publish that pass the bounds (Accepted) with local, the
// routes of this node's own records.
func (c *ClusterNodes) Ranges(self string, local []netip.Prefix, bounds func() ([]netip.Prefix, error)) nodetables.Cluster {
	out := c.nodeRanges()
	accepted, _ := c.Accepted(self, bounds)
	out.Routes = slices.Clone(local)
	for _, p := range accepted {
		out.Routes = append(out.Routes, p.Prefix)
	}
	slices.SortFunc(out.Routes, comparePrefix)
	out.Routes = slices.Compact(out.Routes)
	return out
}

// nodeRanges is Ranges without the routes: every Node's pod CIDRs and node
// IPs, sorted and compacted, computed again only after a change of the
// Nodes' data. The slices are shared: callers must not change them.
func (c *ClusterNodes) nodeRanges() nodetables.Cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	gen := c.gen.Load()
	rc := &c.ranges
	if !rc.valid || rc.gen != gen {
		var podCIDRs, nodeIPList []netip.Prefix
		nodes := c.anyOrder()
		for _, n := range nodes {
			podCIDRs = append(podCIDRs, nodePodCIDRs(n)...)
			nodeIPList = append(nodeIPList, nodeIPs(n)...)
		}
		for _, ps := range []*[]netip.Prefix{&podCIDRs, &nodeIPList} {
			slices.SortFunc(*ps, comparePrefix)
			*ps = slices.Compact(*ps)
		}
		*rc = rangesCache{valid: true, gen: gen, nodes: len(nodes), podCIDRs: podCIDRs, nodeIPs: nodeIPList}
	}
	return nodetables.Cluster{Nodes: rc.nodes, PodCIDRs: rc.podCIDRs, NodeIPs: rc.nodeIPs}
}

func nodePodCIDRs(n *corev1.Node) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range n.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// MaxNodeAddresses is the most InternalIP addresses of one Node that
// become egress exceptions: the first ones, in the order of
// status.addresses. The kubelet writes them, so one Node must not be able
// to grow every node's egress table without bound.
const MaxNodeAddresses = 8

// nodeIPs is n's addresses as host prefixes, at most MaxNodeAddresses.
func nodeIPs(n *corev1.Node) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range n.Status.Addresses {
		if len(out) == MaxNodeAddresses {
			break
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			ip = ip.Unmap()
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
	return out
}

// Write writes Ranges into stateDir when the informer has synced and they
// changed (nodetables.WriteCluster).
func (c *ClusterNodes) Write(self string, local []netip.Prefix, bounds func() ([]netip.Prefix, error)) (r nodetables.Cluster, changed bool, err error) {
	if !c.Synced() {
		return r, false, nil
	}
	r = c.Ranges(self, local, bounds)
	changed, err = nodetables.WriteCluster(c.stateDir, r)
	return r, changed, err
}

// MaxNodePrefixes is the most prefixes one Node may publish in
// NodeRoutesAnnotation: a Node publishing more contributes none (and is
// refused by name), so that no Node can make every other node's agent
// resolve and route an unbounded list.
const MaxNodePrefixes = 64

// NodePrefix is a prefix a Node publishes in NodeRoutesAnnotation that
// passed the bounds (Accepted).
type NodePrefix struct {
	Prefix netip.Prefix
	Node   string
}

// Accepted is the prefixes the cluster's Nodes other than self publish in
// NodeRoutesAnnotation that this node may route and except from egress
// SNAT, by Node name, and a line for each prefix or Node refused. The
// remote routes (remoteRoutes) and the egress exceptions (Write) both come
// from it, so that the two never disagree on what a Node may claim.
//
// A Node contributes none of its prefixes when its annotation does not
// parse or lists more than MaxNodePrefixes. A prefix is refused when it
//   - is a default route (/0), whatever the bounds;
//   - lies outside bounds (forwarding.routablePrefixes of this node's
//     entry, read only when some Node publishes), so a half of the
//     address space (0.0.0.0/1) is refused unless the operator allowed it;
//   - overlaps a pod CIDR of the cluster.
//
// Node IPs (InternalIP) fence nothing beyond the bounds: a kubelet writes
// its own Node's status.addresses, and under NodeRestriction may still put
// an address inside the prefix another node serves; were node IPs a
// reservation, one kubelet could withdraw every other node's routes and
// egress exceptions. Inside forwarding.routablePrefixes the operator
// declared the space as forwarding pods' networks: node subnets belong
// outside it, where no accepted prefix can reach them, and a node IP found
// inside it is reported.
//
// The answer is computed again only when the cache changed (the
// informer's handlers) or the bounds did; bounds is called once per call
// while some Node publishes.
func (c *ClusterNodes) Accepted(self string, bounds func() ([]netip.Prefix, error)) ([]NodePrefix, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gen := c.gen.Load()
	ac := &c.accepted
	if ac.valid && ac.gen == gen && ac.self == self && !ac.publishing {
		return ac.prefixes, ac.refused
	}
	var b []netip.Prefix
	var bErr string
	boundsRead := false
	readBounds := func() {
		var err error
		if b, err = bounds(); err != nil {
			bErr = err.Error()
		}
		boundsRead = true
	}
	if ac.valid && ac.gen == gen && ac.self == self {
		readBounds()
		if bErr == ac.boundsErr && slices.Equal(b, ac.bounds) {
			return ac.prefixes, ac.refused
		}
	}
	nodes := c.nodes()
	publishing := slices.ContainsFunc(nodes, func(n *corev1.Node) bool {
		return n.Name != self && n.Annotations[NodeRoutesAnnotation] != ""
	})
	if publishing && !boundsRead {
		readBounds()
	}
	prefixes, refused := acceptPrefixes(nodes, self, b, bErr)
	*ac = acceptedCache{valid: true, gen: gen, self: self, bounds: b, boundsErr: bErr,
		publishing: publishing, prefixes: prefixes, refused: refused}
	return prefixes, refused
}

// acceptPrefixes is Accepted's rule over nodes (by name), with bounds, or
// boundsErr when they could not be read.
func acceptPrefixes(nodes []*corev1.Node, self string, bounds []netip.Prefix, boundsErr string) (out []NodePrefix, refused []string) {
	var podCIDRs []netip.Prefix
	for _, n := range nodes {
		podCIDRs = append(podCIDRs, nodePodCIDRs(n)...)
	}
	overlapsPodCIDR := newPrefixIndex(podCIDRs).overlaps
	for _, n := range nodes {
		if k := len(n.Status.Addresses); k > MaxNodeAddresses {
			refused = append(refused, fmt.Sprintf("node %s: %d InternalIP addresses, over the cap of %d: the first %d used", n.Name, k, MaxNodeAddresses, MaxNodeAddresses))
		}
		v := n.Annotations[NodeRoutesAnnotation]
		if n.Name == self || v == "" {
			continue
		}
		// Counted before parsing: a Node over the cap costs no more
		// than this count.
		if k := strings.Count(v, ",") + 1; k > MaxNodePrefixes {
			refused = append(refused, fmt.Sprintf("node %s: %d prefixes in %s, over the cap of %d: none used", n.Name, k, NodeRoutesAnnotation, MaxNodePrefixes))
			continue
		}
		ps, err := parseNodeRoutes(v)
		if err != nil {
			refused = append(refused, fmt.Sprintf("node %s: %v: none used", n.Name, err))
			continue
		}
		for _, p := range ps {
			why := ""
			switch {
			case p.Bits() == 0:
				why = "a default route"
			case boundsErr != "":
				why = "forwarding.routablePrefixes unknown: " + boundsErr
			case !insideAny(bounds, p):
				why = fmt.Sprintf("outside forwarding.routablePrefixes %v", bounds)
			case overlapsPodCIDR(p):
				why = "overlaps a pod CIDR"
			}
			if why != "" {
				refused = append(refused, fmt.Sprintf("%s of node %s: %s", p, n.Name, why))
				continue
			}
			out = append(out, NodePrefix{Prefix: p, Node: n.Name})
		}
	}
	if len(bounds) > 0 {
		for _, n := range nodes {
			for _, ip := range nodeIPs(n) {
				if insideAny(bounds, ip) {
					refused = append(refused, fmt.Sprintf("node %s: InternalIP %s lies inside forwarding.routablePrefixes %v: it reserves nothing there (node subnets belong outside them)",
						n.Name, ip.Addr(), bounds))
				}
			}
		}
	}
	return out, refused
}

// prefixIndex answers whether a prefix overlaps any of a set of prefixes
// in O(L log N) for N prefixes of L distinct lengths (a cluster's pod
// CIDRs have one or two: a /24, a /64), where a scan of the set costs
// O(N) per prefix asked and every Node's published prefixes are asked.
type prefixIndex struct {
	// byBits holds, per prefix length, the set's network addresses of
	// that length, sorted.
	byBits map[int][]netip.Addr
}

func newPrefixIndex(ps []netip.Prefix) prefixIndex {
	x := prefixIndex{byBits: map[int][]netip.Addr{}}
	for _, p := range ps {
		p = p.Masked()
		x.byBits[p.Bits()] = append(x.byBits[p.Bits()], p.Addr())
	}
	for b, as := range x.byBits {
		slices.SortFunc(as, netip.Addr.Compare)
		x.byBits[b] = slices.Compact(as)
	}
	return x
}

// overlaps reports whether p overlaps a prefix of the set: one of length
// L <= p's holds p's address masked to L; one longer starts inside p.
func (x prefixIndex) overlaps(p netip.Prefix) bool {
	p = p.Masked()
	last := lastAddr(p)
	for bits, as := range x.byBits {
		if bits <= p.Bits() {
			if q, err := p.Addr().Prefix(bits); err == nil {
				if _, found := slices.BinarySearchFunc(as, q.Addr(), netip.Addr.Compare); found {
					return true
				}
			}
			continue
		}
		i, _ := slices.BinarySearchFunc(as, p.Addr(), netip.Addr.Compare)
		if i < len(as) && as[i].BitLen() == last.BitLen() && as[i].Compare(last) <= 0 {
			return true
		}
	}
	return false
}

// lastAddr is the last address of the masked prefix p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// insideAny reports whether p lies inside one of bounds.
func insideAny(bounds []netip.Prefix, p netip.Prefix) bool {
	return slices.ContainsFunc(bounds, func(b netip.Prefix) bool { return b.Bits() <= p.Bits() && b.Contains(p.Addr()) })
}

// node is the cached Node called name, nil when there is none.
func (c *ClusterNodes) node(name string) *corev1.Node {
	o, ok, _ := c.informer.GetStore().GetByKey(name)
	if !ok {
		return nil
	}
	n, _ := o.(*corev1.Node)
	return n
}
