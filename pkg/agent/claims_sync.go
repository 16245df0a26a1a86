package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/forwarding"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/state"
)

// The claims' reconciler. A release can be lost (the plugin's DEL does not
// wait for an absent agent; a node dies with its pods), and a claim can
// outlive its ADD (the plugin killed between the claim and its record). So
// each agent, every claimSyncEvery:
//
//   - releases its own node's entries whose attachment has no record in
//     stateDir, once they are older than claimGrace (the claim is made
//     before the record is written), and never after a failed read of the
//     records;
//   - releases the entries of Nodes that no longer exist (the Node
//     informer synced and without them);
//   - claims again what a record of its node holds and the pools lack
//     (pools deleted or edited by hand), and reports a record whose claim
//     another attachment holds now.

// claimGrace is how long an entry without a record is left alone: longer
// than an ADD takes from its claim to its record.
const claimGrace = time.Minute

// claimSyncEvery is the reconciler's period.
const claimSyncEvery = 30 * time.Second

// Sync runs the reconciler once over the records of stateDir; gone reports
// whether a Node is known not to exist (nil: none is). It logs what it
// released and claimed, and returns what failed.
func (c *Claims) Sync(ctx context.Context, stateDir string, gone func(node string) bool) error {
	recs, recErr := state.New(stateDir).List()
	recorded := map[string]*state.Record{}
	for _, r := range recs {
		recorded[r.Key()] = r
	}
	items, err := c.listPools(ctx)
	if err != nil {
		return err
	}
	now := c.now()
	stale := func(e claimEntry) bool {
		if e.Node != c.node {
			return gone != nil && gone(e.Node)
		}
		if recErr != nil || recorded[e.Attachment] != nil {
			return false
		}
		since, err := time.Parse(time.RFC3339, e.Since)
		return err != nil || now.Sub(since) > claimGrace
	}
	var errs []error
	if recErr != nil {
		errs = append(errs, fmt.Errorf("records unreadable, no claim of this node released: %w", recErr))
	}
	held := map[string]map[agentapi.Claim]bool{}
	for _, o := range items {
		pool, err := decodePool(&o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if slices.ContainsFunc(pool.Spec.Entries, stale) {
			dropped, err := c.releaseIn(ctx, o.GetName(), stale)
			if err != nil {
				errs = append(errs, err)
			}
			if len(dropped) > 0 {
				c.log.Warn("stale claims released: their attachment has no record on its node, or their node is gone",
					"pool", o.GetName(), "released", describeEntries(dropped))
			}
		}
		for _, e := range pool.Spec.Entries {
			if e.Node == c.node {
				if held[e.Attachment] == nil {
					held[e.Attachment] = map[agentapi.Claim]bool{}
				}
				held[e.Attachment][e.wire(vlanOf(o.GetName()))] = true
			}
		}
	}
	for _, r := range recs {
		if !r.Complete {
			continue // its ADD is under way, and claimed first
		}
		want := podmeta.ClaimOf(r).Wire()
		if !slices.ContainsFunc(want, func(w agentapi.Claim) bool { return !held[r.Key()][w] }) {
			continue
		}
		resp := c.Claim(ctx, agentapi.Request{Op: agentapi.OpClaim, Namespace: r.PodNamespace, Name: r.PodName, UID: r.PodUID,
			Attachment: r.Key(), Claims: want})
		if resp.Code != 0 {
			errs = append(errs, fmt.Errorf("pod %s holds claims the ClaimPools lack, and claiming them again failed: %s", r.PodRef(), resp.Error))
			continue
		}
		c.log.Warn("claims of a recorded attachment were missing from the ClaimPools: claimed again", "pod", r.PodRef(), "attachment", r.Key())
	}
	return errors.Join(errs...)
}

// listPools is every ClaimPool: the routes pool as its informer holds it
// (once synced), the others listed. The routes pool holds every forwarded
// route of the cluster and every agent syncs every claimSyncEvery, so a
// LIST of it would cost the apiserver and each agent bytes in proportion
// to the cluster's routes at rest; a release reads the pool again before
// it writes (releaseIn), so a cached read decides nothing alone.
func (c *Claims) listPools(ctx context.Context) ([]unstructured.Unstructured, error) {
	var cached *unstructured.Unstructured
	opts := metav1.ListOptions{}
	if c.routes.HasSynced() {
		opts.FieldSelector = "metadata.name!=" + routesPool
		if o, ok, err := c.routes.GetStore().GetByKey(routesPool); err == nil && ok {
			if u, isU := o.(*unstructured.Unstructured); isU {
				cached = u.DeepCopy()
			}
		}
	}
	list, err := c.pools.List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("failed to list the ClaimPools: %w", err)
	}
	items := list.Items
	if opts.FieldSelector != "" {
		// A client that ignores the selector (a fake) lists it too.
		items = slices.DeleteFunc(items, func(u unstructured.Unstructured) bool { return u.GetName() == routesPool })
		if cached != nil {
			items = append(items, *cached)
		}
	}
	return items, nil
}

// gone reports whether the cache has been filled and holds no Node name,
// and etcd has none either: the cache learns of a new Node only when its
// PodwireNode or the periodic LIST announces it, so its absence there is
// no proof (a Node the GET finds is queued for the cache).
func (c *ClusterNodes) gone(name string) bool {
	if !c.Synced() {
		return false
	}
	if _, exists, err := c.informer.GetStore().GetByKey(name); err != nil || exists {
		return false
	}
	if c.source == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.source.get(ctx, name, false)
	if err == nil {
		c.source.queue.add(name)
	}
	return apierrors.IsNotFound(err)
}

// reconcileClaims syncs the node's records' claims with the ClaimPools
// (Claims.Sync): it adds what a record holds and the pool lacks, and
// releases what no record holds any more and what Nodes that are gone
// held. It runs on a runner of its own, so that its API requests never
// hold back a repair of the node.
//
// Triggers: a record written or removed; claimSyncEvery as a backstop, and
// at the start: after an upgrade from a release without ClaimPools, the
// other nodes route this node's prefixes only once its records' claims are
// in the pool.
func (a *Agent) reconcileClaims(ctx context.Context) error {
	var gone func(string) bool
	if a.cfg.Cluster.Nodes != nil {
		gone = a.cfg.Cluster.Nodes.gone
	}
	cctx, cancel := context.WithTimeout(ctx, claimSyncEvery)
	defer cancel()
	return a.cfg.Cluster.Claims.Sync(cctx, a.cfg.StateDir, gone)
}

// handleClaims answers an OpClaim or OpRelease of the plugin.
func (a *Agent) handleClaims(ctx context.Context, req agentapi.Request) *agentapi.Response {
	if a.cfg.Cluster.Claims == nil {
		return &agentapi.Response{Code: 11, Error: "this agent holds no cluster-wide claims (no API client)"}
	}
	if req.Op == agentapi.OpRelease {
		return a.cfg.Cluster.Claims.Release(ctx, req.Attachment)
	}
	resp := a.cfg.Cluster.Claims.Claim(ctx, req)
	if resp.Code != 0 {
		a.log.Info("claim not granted", "pod", req.Namespace+"/"+req.Name, "uid", req.UID, "attachment", req.Attachment,
			"code", resp.Code, "reason", resp.Reason, "error", resp.Error)
	}
	return resp
}

// heldRoutes keeps of want (remoteRoutes') the routes whose prefix the
// ClaimPool routes holds for a pod of the route's node: the pool, checked
// for overlap across the cluster at each ADD, decides who serves a prefix;
// a Node's annotation alone (anyone who may patch Nodes can write it) does
// not. What it leaves out is added to skipped. Without Claims (no API
// client), want is kept whole.
func (a *Agent) heldRoutes(want []forwarding.RemoteRoute, skipped []string) ([]forwarding.RemoteRoute, []string) {
	if a.cfg.Cluster.Claims == nil {
		return want, skipped
	}
	held, err := a.cfg.Cluster.Claims.routeHolders()
	kept := want[:0:0]
	for _, r := range want {
		switch {
		case err != nil:
			skipped = append(skipped, fmt.Sprintf("%s of node %s: %v", r.Dst, r.Node, err))
		case !held[routeHolder{node: r.Node, prefix: r.Dst.Masked().String()}]:
			skipped = append(skipped, fmt.Sprintf("%s of node %s: not held by a pod of that node in ClaimPool %s", r.Dst, r.Node, routesPool))
		default:
			kept = append(kept, r)
		}
	}
	return kept, skipped
}

// claimsVersion is the resourceVersion of the routes' ClaimPool as the
// informer holds it ("" without Claims or before it is listed).
func (a *Agent) claimsVersion() string {
	if a.cfg.Cluster.Claims == nil {
		return ""
	}
	o, ok, err := a.cfg.Cluster.Claims.routes.GetStore().GetByKey(routesPool)
	if err != nil || !ok {
		return ""
	}
	if u, isU := o.(*unstructured.Unstructured); isU {
		return u.GetResourceVersion()
	}
	return ""
}
