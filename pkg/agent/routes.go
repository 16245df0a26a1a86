package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podwire/podwire/pkg/forwarding"
	"github.com/podwire/podwire/pkg/state"
)

// Forwarding across nodes. A forwarding pod's podwire.io/routes become
// routes of its own node (the plugin's, via the pod). For the other nodes
// the agents carry them, as flannel's agents carry pod CIDRs:
//
//   - each agent publishes the prefixes that the records of its node
//     route (what its plugin admitted, never a pod's raw annotation) in its
//     Node's NodeRoutesAnnotation;
//   - each agent routes every other node's published prefixes with the
//     next hop its node uses toward that node's pod CIDR of the family
//     (flannel's vxlan: via the other node's flannel.1 address), as
//     forwarding.ProtoRemote routes, and removes the ones no node
//     publishes any more.
//
// The networks outside the cluster learn a prefix as they learn pod CIDRs
// (a BGP speaker or a static route toward the node that publishes it):
// podwire programs the nodes only.

// NodeRoutesAnnotation is the Node annotation that lists the prefixes that
// forwarding pods on the node serve: comma-separated canonical CIDRs,
// sorted. The node's agent is its only writer.
const NodeRoutesAnnotation = "podwire.io/routes"

// parseNodeRoutes parses a NodeRoutesAnnotation value.
func parseNodeRoutes(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return out, fmt.Errorf("%s: %w", NodeRoutesAnnotation, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// localRoutes is the annotation value for the routes of this node's
// records.
func localRoutes(stateDir string) (string, []netip.Prefix, error) {
	recs, err := state.New(stateDir).List()
	if err != nil {
		return "", nil, err
	}
	var ps []netip.Prefix
	for _, r := range recs {
		for _, rt := range r.Routes {
			ps = append(ps, rt.Dst.Masked())
		}
	}
	slices.SortFunc(ps, comparePrefix)
	ps = slices.Compact(ps)
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ","), ps, nil
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// routeSync is what reconcileRoutes last read and applied, so that a pass with
// nothing changed reads no record and dumps no route table.
type routeSync struct {
	// dirTime is stateDir's mtime when the records were last read, at
	// readAt: a record is written by a rename and removed by an unlink,
	// and both change it.
	dirTime, readAt time.Time
	annotation      string
	local           []netip.Prefix
	// accepted and appliedLocal are what the remote routes were last
	// synced from, at syncedAt.
	accepted     []NodePrefix
	appliedLocal []netip.Prefix
	// heldVersion is the routes' ClaimPool's resourceVersion then.
	heldVersion string
	syncedAt    time.Time
	// bounds is routableBounds' memory.
	bounds boundsMemo
	// hops is the next hops resolved since the node's routes last changed.
	hops nextHops
}

// nextHops caches this node's next hop toward each other node's pod CIDR
// (forwarding.NextHopTo, two netlink requests each), so that a pass after
// one Node's change resolves that Node's only, not every publishing
// Node's again. The node's FIB decides a next hop: the route
// notifications (notify.go) bump fib on any route change that is not the
// agent's own ProtoRemote, and the next pass drops every cached hop.
type nextHops struct {
	fib atomic.Uint64
	// Of the runner's goroutine:
	gen      uint64 // fib when byTarget was started
	byTarget map[netip.Addr]nextHop
}

type nextHop struct {
	gw  netip.Addr
	dev string
}

// fibChanged says that the node's routes changed (a route notification
// other than of the agent's ProtoRemote routes); safe from any goroutine.
func (h *nextHops) fibChanged() { h.fib.Add(1) }

// resolver is the next-hop lookup of one pass: cached answers while the
// FIB is unchanged since they were resolved, resolve's otherwise. Failures
// are not cached: they are asked again at the next pass.
func (h *nextHops) resolver(resolve func(netip.Addr) (netip.Addr, string, error)) func(netip.Addr) (netip.Addr, string, error) {
	if g := h.fib.Load(); h.byTarget == nil || g != h.gen {
		h.gen, h.byTarget = g, map[netip.Addr]nextHop{}
	}
	return func(target netip.Addr) (netip.Addr, string, error) {
		if nh, ok := h.byTarget[target]; ok {
			return nh.gw, nh.dev, nil
		}
		gw, dev, err := resolve(target)
		if err == nil {
			h.byTarget[target] = nextHop{gw: gw, dev: dev}
		}
		return gw, dev, err
	}
}

// resyncEvery bounds how long a remote route removed or changed by hand
// stays so when nothing else changed.
const resyncEvery = 30 * time.Second

// recordRoutes is localRoutes, read again only when stateDir changed.
func (a *Agent) recordRoutes() (string, []netip.Prefix, error) {
	fi, err := os.Stat(a.cfg.StateDir)
	if err != nil {
		return "", nil, err
	}
	rs := &a.memo.routes
	// The mtime comes from a coarse clock: a change in the same tick of
	// it as the last read keeps the mtime, so the cache counts only when
	// that read came well after the mtime.
	if !rs.dirTime.IsZero() && fi.ModTime().Equal(rs.dirTime) && rs.readAt.Sub(rs.dirTime) > time.Second {
		return rs.annotation, rs.local, nil
	}
	now := time.Now()
	v, local, err := localRoutes(a.cfg.StateDir)
	if err != nil {
		return "", nil, err
	}
	rs.dirTime, rs.readAt, rs.annotation, rs.local = fi.ModTime(), now, v, local
	return v, local, nil
}

// publishRoutes patches this node's NodeRoutesAnnotation when the records'
// routes differ from it (absent when there are none). It returns the
// local prefixes, which remote routes never override.
func (a *Agent) publishRoutes(ctx context.Context) ([]netip.Prefix, error) {
	want, local, err := a.recordRoutes()
	if err != nil {
		return nil, err
	}
	m := a.api.node.meta()
	if m == nil {
		return local, nil // not listed yet
	}
	if have, ok := m.Annotations[NodeRoutesAnnotation]; have == want && (ok || want == "") {
		return local, nil
	}
	var v any // null removes the annotation
	if want != "" {
		v = want
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{NodeRoutesAnnotation: v}}})
	if _, err := a.api.md.Resource(nodesResource).Patch(ctx, a.cfg.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return local, fmt.Errorf("failed to publish the node's forwarded routes %q: %w", want, err)
	}
	a.log.Info("node's forwarded routes published", "annotation", NodeRoutesAnnotation, "value", want)
	return local, nil
}

// routableBounds is forwarding.routablePrefixes of podwire's entry in the
// conflist it is in: the receiving side's bound on what another Node may
// publish, the one its own plugin admits (a Node's annotation is written
// by that node's agent, but also by whoever else may patch Nodes).
// It is read again only when the conflist's path, size or mtime changed.
func (a *Agent) routableBounds() ([]netip.Prefix, error) {
	conflist := a.conflist()
	if conflist == "" {
		return nil, errors.New("podwire is not in the chain yet")
	}
	fi, err := os.Stat(conflist)
	if err != nil {
		return nil, err
	}
	m := &a.memo.routes.bounds
	// As recordRoutes: a read in the mtime's own coarse tick counts for
	// nothing.
	if m.path == conflist && m.size == fi.Size() && m.mtime.Equal(fi.ModTime()) && m.readAt.Sub(m.mtime) > time.Second {
		return m.prefixes, nil
	}
	now := time.Now()
	ps, err := readRoutableBounds(conflist)
	if err == nil {
		*m = boundsMemo{path: conflist, size: fi.Size(), mtime: fi.ModTime(), readAt: now, prefixes: ps}
	}
	return ps, err
}

// boundsMemo is routableBounds' last good read.
type boundsMemo struct {
	path     string
	size     int64
	mtime    time.Time
	readAt   time.Time
	prefixes []netip.Prefix
}

// readRoutableBounds is forwarding.routablePrefixes of podwire's entry in
// conflist.
func readRoutableBounds(conflist string) ([]netip.Prefix, error) {
	conf, err := readEntryConf(conflist)
	if err != nil {
		return nil, err
	}
	return conf.RoutablePrefixes, nil
}

// remoteRoutes is what this node routes toward other nodes' forwarding
// pods: each prefix another Node publishes that passes the bounds
// (ClusterNodes.Accepted), via this node's next hop to that Node's pod
// CIDR of the prefix's family, as nextHop resolves it (forwarding.NextHopTo,
// or a cache of it). An accepted prefix is still left out, with
// a reason, when it is served on this node too (the local route wins) or
// another node published it first (by name).
func (c *ClusterNodes) remoteRoutes(accepted []NodePrefix, local []netip.Prefix, nextHop func(netip.Addr) (netip.Addr, string, error)) (want []forwarding.RemoteRoute, skipped []string) {
	taken := map[netip.Prefix]string{}
	for _, p := range local {
		taken[p] = "this node"
	}
	for _, np := range accepted {
		p, node := np.Prefix, np.Node
		if by, ok := taken[p]; ok {
			skipped = append(skipped, fmt.Sprintf("%s of node %s: served by %s", p, node, by))
			continue
		}
		n := c.node(node)
		if n == nil {
			continue // deleted since Accepted's answer
		}
		target, ok := podCIDROf(n, p.Addr().Is4())
		if !ok {
			skipped = append(skipped, fmt.Sprintf("%s of node %s: the node has no pod CIDR of its family", p, node))
			continue
		}
		gw, dev, err := nextHop(target)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s of node %s: %v", p, node, err))
			continue
		}
		taken[p] = "node " + node
		want = append(want, forwarding.RemoteRoute{Dst: p, Gw: gw, Dev: dev, Node: node})
	}
	return want, skipped
}

// podCIDROf is the first address of n's pod CIDR of a family, where the
// node's primary routes its pods (flannel's vxlan gateway is that address).
func podCIDROf(n *corev1.Node, v4 bool) (netip.Addr, bool) {
	for _, s := range n.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() == v4 {
			return p.Masked().Addr().Next(), true
		}
	}
	return netip.Addr{}, false
}

// reconcileRoutes publishes this node's forwarded routes and routes the
// other nodes'; changes are logged. The routes are synced only when the
// accepted prefixes, the local ones or the ClaimPool changed, or every
// resyncEvery; a next hop is resolved again only after the node's routes
// changed (nextHops), so a pass costs the routes' dump and what changed,
// not a lookup per publishing Node. Other Nodes' data that the bounds
// refuse is a finding ("node data"), not a failure: a retry would refuse
// it again.
//
// Triggers: a record written or removed (stateDir), a change of the
// cluster's Nodes or of the routes' ClaimPool; resyncEvery as a backstop
// (a route removed or changed by hand, a next hop changed).
func (a *Agent) reconcileRoutes(ctx context.Context) error {
	local, err := a.publishRoutes(ctx)
	if err != nil {
		err = fmt.Errorf("route publication: %w", err)
	}
	nodes := a.cfg.Cluster.Nodes
	if nodes == nil || !nodes.Synced() {
		return err
	}
	accepted, refused := nodes.Accepted(a.cfg.Node, a.routableBounds)
	a.setFinding("node data", refusedError(refused))
	// The routes' ClaimPool decides too (heldRoutes): a change of it alone
	// (a claim landing after the Node's annotation) syncs at once.
	held := a.claimsVersion()
	rs := &a.memo.routes
	if slices.Equal(accepted, rs.accepted) && slices.Equal(local, rs.appliedLocal) && held == rs.heldVersion && time.Since(rs.syncedAt) < resyncEvery {
		return err
	}
	want, skipped := a.heldRoutes(nodes.remoteRoutes(accepted, local, rs.hops.resolver(forwarding.NextHopTo)))
	added, deleted, syncErr := forwarding.SyncRemoteRoutes(want)
	if syncErr == nil {
		rs.accepted, rs.appliedLocal, rs.heldVersion, rs.syncedAt = accepted, local, held, time.Now()
	} else {
		syncErr = fmt.Errorf("remote routes: %w", syncErr)
	}
	if len(added) > 0 || len(deleted) > 0 {
		a.log.Info("routes to other nodes' forwarding pods synced", "added", added, "deleted", deleted, "skipped", skipped)
	}
	return errors.Join(err, syncErr)
}

// refusedError is the Nodes' data that Accepted refused or capped, as one error
// (nil when none), the first few lines in full: the agent's status names
// what was refused, the log the rest when it changes.
func refusedError(refused []string) error {
	const show = 5
	if len(refused) == 0 {
		return nil
	}
	msg := strings.Join(refused[:min(show, len(refused))], "; ")
	if len(refused) > show {
		msg += fmt.Sprintf("; and %d more", len(refused)-show)
	}
	return errors.New(msg)
}
