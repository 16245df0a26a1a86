package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/podmeta"
)

// Cluster-wide claims. A routed prefix, a static address on a VLAN and a
// VRRP virtual address span nodes (a route is announced from one node to
// the whole network; a VLAN is one segment through the switches), so the
// plugin's check against its own node's records (podmeta.CheckClaims under
// the node lock) cannot keep a pod of another node off them. The agents
// hold every node's claims in ClaimPool objects (podwire.io/v1alpha1,
// cluster-scoped, the chart's CRD), one per claim domain: "routes" (every
// forwarded route of the cluster, since an overlap needs them all in one
// place) and "vlan-<VID>" (the static and virtual addresses on one VLAN).
// A claim reads the pool, checks it against every other attachment's
// entries with podmeta.CheckClaims' rules, and writes it back with the
// resourceVersion it read: of two claims racing on two nodes, the second
// write is a Conflict, re-reads, sees the first and is refused (as
// whereabouts' IPPools). No API, no claim: the plugin gets error 11.
//
// Limits: a pool is one object, so it holds what etcd holds in one value
// (about 1.5 MiB: some thousands of entries per domain); claims are
// written on ADD only, so a pool is read and written once per claiming
// ADD and per release, never for an ordinary pod.

// ClaimPoolResource is the ClaimPool custom resource.
var ClaimPoolResource = schema.GroupVersionResource{Group: "podwire.io", Version: "v1alpha1", Resource: "claimpools"}

// claimPoolKind and claimPoolAPIVersion name the kind in objects written.
const (
	claimPoolKind       = "ClaimPool"
	claimPoolAPIVersion = "podwire.io/v1alpha1"
	// routesPool is the domain of every forwarded route.
	routesPool = "routes"
)

// claimEntry is one claim of one attachment in a ClaimPool's spec.entries.
type claimEntry struct {
	// Kind is agentapi.ClaimRoute, ClaimAddress or ClaimVIP; Value a
	// canonical CIDR or a plain address; VRID a ClaimVIP's group.
	Kind  string `json:"kind"`
	Value string `json:"value"`
	VRID  uint8  `json:"vrid,omitempty"`
	// Namespace, Pod and UID are the holder; Node its node and Attachment
	// its "containerID/ifname" there.
	Namespace  string `json:"namespace"`
	Pod        string `json:"pod"`
	UID        string `json:"uid,omitempty"`
	Node       string `json:"node"`
	Attachment string `json:"attachment"`
	// Since is when the claim was made (RFC 3339): the reconciler leaves an
	// entry whose record is not written yet alone for a grace.
	Since string `json:"since,omitempty"`
}

// claimPool is a ClaimPool object.
type claimPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              claimPoolSpec `json:"spec"`
}

type claimPoolSpec struct {
	Entries []claimEntry `json:"entries,omitempty"`
}

// holder names the attachment of e for refusals and logs.
func (e claimEntry) holder() string {
	return fmt.Sprintf("%s/%s (node %s)", e.Namespace, e.Pod, e.Node)
}

// key is e's attachment across nodes.
func (e claimEntry) key() string { return e.Node + "/" + e.Attachment }

func (e claimEntry) wire(vlan uint16) agentapi.Claim {
	c := agentapi.Claim{Kind: e.Kind, Value: e.Value, VRID: e.VRID}
	if e.Kind != agentapi.ClaimRoute {
		c.VLAN = vlan
	}
	return c
}

// poolOf is the domain of claim c.
func poolOf(c agentapi.Claim) string {
	if c.Kind == agentapi.ClaimRoute {
		return routesPool
	}
	return fmt.Sprintf("vlan-%d", c.VLAN)
}

// vlanOf is the VLAN of a "vlan-<VID>" pool (0 for routesPool).
func vlanOf(pool string) uint16 {
	var v uint16
	_, _ = fmt.Sscanf(pool, "vlan-%d", &v)
	return v
}

// Claims holds this node's claims in the ClaimPools (one per agent).
type Claims struct {
	pools dynamic.NamespaceableResourceInterface
	node  string
	log   *slog.Logger
	// now is the clock (a test's fake).
	now func() time.Time
	// routes follows the ClaimPool routesPool (RouteHeld).
	routes cache.SharedIndexInformer
}

// NewClaims builds Claims over a dynamic client of the API.
func NewClaims(dyn dynamic.Interface, node string, log *slog.Logger) *Claims {
	routes := dynamicinformer.NewFilteredDynamicInformer(dyn, ClaimPoolResource, "", 10*time.Minute, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + routesPool }).Informer()
	return &Claims{pools: dyn.Resource(ClaimPoolResource), node: node, log: log, now: time.Now, routes: routes}
}

// RouteHeld reports whether the ClaimPool routes holds prefix p for a pod
// of node; an error until the informer has listed it once, or when the pool
// does not decode.
func (c *Claims) RouteHeld(node string, p netip.Prefix) (bool, error) {
	held, err := c.routeHolders()
	return held[routeHolder{node: node, prefix: p.Masked().String()}], err
}

// routeHolder is a route entry of the ClaimPool routes: a prefix
// (canonical CIDR) and the node of the pod holding it.
type routeHolder struct{ node, prefix string }

// routeHolders is every route entry of the ClaimPool routes, decoded once
// for a pass over every remote route (the pool holds the whole cluster's);
// an error until the informer has listed it once, or when the pool does
// not decode. Without a pool, none.
func (c *Claims) routeHolders() (map[routeHolder]bool, error) {
	if !c.routes.HasSynced() {
		return nil, errors.New("ClaimPool routes not read yet")
	}
	o, ok, err := c.routes.GetStore().GetByKey(routesPool)
	if err != nil || !ok {
		return nil, err
	}
	u, isU := o.(*unstructured.Unstructured)
	if !isU {
		return nil, fmt.Errorf("ClaimPool routes is a %T", o)
	}
	pool, err := decodePool(u)
	if err != nil {
		return nil, err
	}
	held := map[routeHolder]bool{}
	for _, e := range pool.Spec.Entries {
		if e.Kind == agentapi.ClaimRoute {
			held[routeHolder{node: e.Node, prefix: e.Value}] = true
		}
	}
	return held, nil
}

// claimBackoff spaces the retries of a claim that lost a race (a Conflict):
// one per racing claim on the pool, so a burst of claiming ADDs across the
// nodes gets through in some tens of ms each.
var claimBackoff = wait.Backoff{Steps: 12, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: time.Second}

// Claim holds req.Claims for the attachment req.Attachment of this node,
// pool by pool in a fixed order (of two attachments that race for the same
// claims, the one that wins the first pool wins them all). The answer: code
// 0 when held; 7 with the refusal naming the holder when another
// attachment holds one of them (what this call took before that is given
// back); 11 with the error when the API cannot tell.
func (c *Claims) Claim(ctx context.Context, req agentapi.Request) *agentapi.Response {
	if req.Attachment == "" || req.Namespace == "" || req.Name == "" {
		return &agentapi.Response{Code: types.ErrInvalidNetworkConfig, Error: "a claim names its attachment and pod"}
	}
	byPool := map[string][]agentapi.Claim{}
	for _, w := range req.Claims {
		byPool[poolOf(w)] = append(byPool[poolOf(w)], w)
	}
	pools := make([]string, 0, len(byPool))
	for p := range byPool {
		pools = append(pools, p)
	}
	slices.Sort(pools)
	pod := req.Namespace + "/" + req.Name
	mine := make(map[string]podmeta.Claim, len(pools))
	for _, p := range pools {
		cl, err := podmeta.ClaimOfWire(c.node+"/"+req.Attachment, fmt.Sprintf("%s (node %s)", pod, c.node), req.Namespace, byPool[p])
		if err != nil {
			return &agentapi.Response{Code: types.ErrInvalidNetworkConfig, Error: err.Error()}
		}
		mine[p] = cl
	}
	since := c.now().UTC().Format(time.RFC3339)
	var held []string
	for _, p := range pools {
		var entries []claimEntry
		for _, w := range byPool[p] {
			entries = append(entries, claimEntry{Kind: w.Kind, Value: w.Value, VRID: w.VRID,
				Namespace: req.Namespace, Pod: req.Name, UID: req.UID, Node: c.node, Attachment: req.Attachment, Since: since})
		}
		refusal, err := c.claimIn(ctx, p, mine[p], entries)
		if err == nil && refusal == nil {
			held = append(held, p)
			continue
		}
		// What this claim took in the pools before is given back: a
		// pod refused holds nothing.
		for _, q := range held {
			if _, rerr := c.releaseIn(ctx, q, func(e claimEntry) bool { return e.Node == c.node && e.Attachment == req.Attachment }); rerr != nil {
				c.log.Warn("failed to give back a refused pod's claims; the reconciler will", "pool", q, "pod", pod, "error", rerr)
			}
		}
		if err != nil {
			return &agentapi.Response{Code: types.ErrTryAgainLater, Error: fmt.Sprintf("ClaimPool %s: %v", p, err)}
		}
		return &agentapi.Response{Code: types.ErrInvalidNetworkConfig, Reason: refusal.Gate, Error: refusal.Err.Msg}
	}
	c.log.Info("claims held", "pod", pod, "uid", req.UID, "attachment", req.Attachment, "claims", len(req.Claims), "pools", pools)
	return &agentapi.Response{}
}

// claimIn holds mine (whose entries are entries) in pool p: a refusal when
// another attachment of the pool holds one of them, an error when the API
// failed.
func (c *Claims) claimIn(ctx context.Context, p string, mine podmeta.Claim, entries []claimEntry) (*podmeta.Refusal, error) {
	var refusal *podmeta.Refusal
	err := retry.RetryOnConflict(claimBackoff, func() error {
		refusal = nil
		obj, err := c.pools.Get(ctx, p, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.pools.Create(ctx, poolObject(p, entries), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// Another node created it first: read it.
				return apierrors.NewConflict(ClaimPoolResource.GroupResource(), p, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		pool, err := decodePool(obj)
		if err != nil {
			return err
		}
		var others []claimEntry
		for _, e := range pool.Spec.Entries {
			if e.Node != c.node || e.Attachment != entries[0].Attachment {
				others = append(others, e)
			}
		}
		if err := checkPool(mine, others, vlanOf(p)); err != nil {
			if !errors.As(err, &refusal) {
				return err
			}
			return nil
		}
		pool.Spec.Entries = append(others, entries...)
		return c.update(ctx, obj, pool)
	})
	return refusal, err
}

// checkPool checks mine against the attachments of others (the entries of
// one pool, on VLAN vlan for a VLAN pool).
func checkPool(mine podmeta.Claim, others []claimEntry, vlan uint16) error {
	var order []string
	byKey := map[string][]claimEntry{}
	for _, e := range others {
		if _, ok := byKey[e.key()]; !ok {
			order = append(order, e.key())
		}
		byKey[e.key()] = append(byKey[e.key()], e)
	}
	held := make([]podmeta.Claim, 0, len(order))
	for _, k := range order {
		es := byKey[k]
		ws := make([]agentapi.Claim, len(es))
		for i, e := range es {
			ws[i] = e.wire(vlan)
		}
		h, err := podmeta.ClaimOfWire(k, es[0].holder(), es[0].Namespace, ws)
		if err != nil {
			// Someone wrote the pool by hand: what it says is held all
			// the same, so the claim cannot be checked.
			return fmt.Errorf("entry of %s: %w", es[0].holder(), err)
		}
		held = append(held, h)
	}
	return podmeta.CheckClaims(mine, held)
}

// Release drops every claim of attachment (this node's) from the pools,
// reporting what it dropped.
func (c *Claims) Release(ctx context.Context, attachment string) *agentapi.Response {
	if attachment == "" {
		return &agentapi.Response{Code: types.ErrInvalidNetworkConfig, Error: "a release names its attachment"}
	}
	list, err := c.pools.List(ctx, metav1.ListOptions{})
	if err != nil {
		return &agentapi.Response{Code: types.ErrTryAgainLater, Error: fmt.Sprintf("failed to list the ClaimPools: %v", err)}
	}
	var errs []error
	for _, o := range list.Items {
		dropped, err := c.releaseIn(ctx, o.GetName(), func(e claimEntry) bool { return e.Node == c.node && e.Attachment == attachment })
		if err != nil {
			errs = append(errs, err)
		}
		for _, e := range dropped {
			c.log.Info("claim released", "pool", o.GetName(), "kind", e.Kind, "value", e.Value, "pod", e.Namespace+"/"+e.Pod, "attachment", attachment)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return &agentapi.Response{Code: types.ErrTryAgainLater, Error: err.Error()}
	}
	return &agentapi.Response{}
}

// releaseIn drops the entries of pool p that drop selects, and returns
// them.
func (c *Claims) releaseIn(ctx context.Context, p string, drop func(claimEntry) bool) ([]claimEntry, error) {
	var dropped []claimEntry
	err := retry.RetryOnConflict(claimBackoff, func() error {
		dropped = nil
		obj, err := c.pools.Get(ctx, p, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		pool, err := decodePool(obj)
		if err != nil {
			return err
		}
		var keep []claimEntry
		for _, e := range pool.Spec.Entries {
			if drop(e) {
				dropped = append(dropped, e)
			} else {
				keep = append(keep, e)
			}
		}
		if len(dropped) == 0 {
			return nil
		}
		pool.Spec.Entries = keep
		return c.update(ctx, obj, pool)
	})
	if err != nil {
		return nil, fmt.Errorf("ClaimPool %s: %w", p, err)
	}
	return dropped, nil
}

// update writes pool's entries into obj (as read, so its resourceVersion
// makes the write conditional) and updates it.
func (c *Claims) update(ctx context.Context, obj *unstructured.Unstructured, pool *claimPool) error {
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pool.Spec)
	if err != nil {
		return err
	}
	obj.Object["spec"] = spec
	_, err = c.pools.Update(ctx, obj, metav1.UpdateOptions{})
	return err
}

// poolObject is a new ClaimPool p holding entries.
func poolObject(p string, entries []claimEntry) *unstructured.Unstructured {
	es := make([]any, len(entries))
	for i := range entries {
		es[i], _ = runtime.DefaultUnstructuredConverter.ToUnstructured(&entries[i])
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": claimPoolAPIVersion, "kind": claimPoolKind,
		"metadata": map[string]any{"name": p},
		"spec":     map[string]any{"entries": es},
	}}
}

// decodePool converts obj to a claimPool.
func decodePool(obj *unstructured.Unstructured) (*claimPool, error) {
	var pool claimPool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &pool); err != nil {
		return nil, fmt.Errorf("ClaimPool %s does not decode: %w", obj.GetName(), err)
	}
	return &pool, nil
}

// describeEntries is entries for a log line.
func describeEntries(es []claimEntry) string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = fmt.Sprintf("%s %s of %s", e.Kind, e.Value, e.holder())
	}
	return strings.Join(s, ", ")
}
