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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podwire/podwire/pkg/forwarding"
	"github.com/podwire/podwire/pkg/install"
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

// routeSync is what syncRoutes last read and applied, so that a tick with
// nothing changed reads no record and dumps no route table.
type routeSync struct {
	// dirTime is stateDir's mtime when the records were last read, at
	// readAt: a record is written by a rename and removed by an unlink,
	// and both change it.
	dirTime, readAt time.Time
	annotation      string
	local           []netip.Prefix
	// applied is the remote routes last synced, at syncedAt.
	applied  []forwarding.RemoteRoute
	syncedAt time.Time
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
	rs := &a.routes
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
	m := a.node.meta()
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
	if _, err := a.md.Resource(nodesResource).Patch(ctx, a.cfg.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return local, fmt.Errorf("failed to publish the node's forwarded routes %q: %w", want, err)
	}
	a.log.Info("node's forwarded routes published", "annotation", NodeRoutesAnnotation, "value", want)
	return local, nil
}

// routableBounds is forwarding.routablePrefixes of podwire's entry in the
// conflist it is in: the receiving side's bound on what another Node may
// publish, the one its own plugin admits (a Node's annotation is written
// by that node's agent, but also by whoever else may patch Nodes).
func (a *Agent) routableBounds() ([]netip.Prefix, error) {
	a.mu.Lock()
	conflist := a.status.Conflist
	a.mu.Unlock()
	if conflist == "" {
		return nil, errors.New("podwire is not in the chain yet")
	}
	data, err := os.ReadFile(conflist)
	if err != nil {
		return nil, err
	}
	e, ok, err := install.Entry(data)
	if err != nil || !ok {
		return nil, fmt.Errorf("no podwire entry in %s: %v", conflist, err)
	}
	conf, err := install.ParseEntry(e)
	if err != nil {
		return nil, err
	}
	return conf.RoutablePrefixes, nil
}

// remoteRoutes is what this node routes toward other nodes' forwarding
// pods: each prefix another Node publishes, via this node's next hop to
// that Node's pod CIDR of the prefix's family. A prefix is left out, with
// a reason, when it lies outside bounds (forwarding.routablePrefixes, read
// by the call only when some Node publishes a prefix), overlaps a pod CIDR
// or node IP of the cluster (it would take over their traffic), is a
// default route, is served on this node too (the local route wins), or
// another node published it first (by name).
func (c *ClusterNodes) remoteRoutes(self string, local []netip.Prefix, bounds func() ([]netip.Prefix, error)) (want []forwarding.RemoteRoute, skipped []string) {
	var nodes []*corev1.Node
	for _, o := range c.informer.GetStore().List() {
		if n, ok := o.(*corev1.Node); ok && n.Name != self {
			nodes = append(nodes, n)
		}
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	r := c.Ranges()
	reserved := append(slices.Clone(r.PodCIDRs), r.NodeIPs...)
	taken := map[netip.Prefix]string{}
	for _, p := range local {
		taken[p] = "this node"
	}
	var allowed []netip.Prefix
	var boundsErr error
	boundsRead := false
	for _, n := range nodes {
		ps, err := parseNodeRoutes(n.Annotations[NodeRoutesAnnotation])
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("node %s: %v", n.Name, err))
		}
		if len(ps) > 0 && !boundsRead {
			allowed, boundsErr = bounds()
			boundsRead = true
		}
		for _, p := range ps {
			if boundsErr != nil {
				skipped = append(skipped, fmt.Sprintf("%s of node %s: forwarding.routablePrefixes unknown: %v", p, n.Name, boundsErr))
				continue
			}
			if !slices.ContainsFunc(allowed, func(b netip.Prefix) bool { return b.Bits() <= p.Bits() && b.Contains(p.Addr()) }) {
				skipped = append(skipped, fmt.Sprintf("%s of node %s: outside forwarding.routablePrefixes %v", p, n.Name, allowed))
				continue
			}
			if by, ok := taken[p]; ok {
				skipped = append(skipped, fmt.Sprintf("%s of node %s: served by %s", p, n.Name, by))
				continue
			}
			if p.Bits() == 0 || slices.ContainsFunc(reserved, p.Overlaps) {
				skipped = append(skipped, fmt.Sprintf("%s of node %s: a default route or overlaps a pod CIDR or node IP", p, n.Name))
				continue
			}
			target, ok := podCIDROf(n, p.Addr().Is4())
			if !ok {
				skipped = append(skipped, fmt.Sprintf("%s of node %s: the node has no pod CIDR of its family", p, n.Name))
				continue
			}
			gw, dev, err := forwarding.NextHopTo(target)
			if err != nil {
				skipped = append(skipped, fmt.Sprintf("%s of node %s: %v", p, n.Name, err))
				continue
			}
			taken[p] = "node " + n.Name
			want = append(want, forwarding.RemoteRoute{Dst: p, Gw: gw, Dev: dev, Node: n.Name})
		}
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

// syncRoutes publishes this node's forwarded routes and routes the other
// nodes'; changes are logged.
func (a *Agent) syncRoutes(ctx context.Context) {
	local, err := a.publishRoutes(ctx)
	a.setErr("route publication", err)
	if a.cfg.Cluster == nil || !a.cfg.Cluster.Synced() {
		return
	}
	want, skipped := a.heldRoutes(a.cfg.Cluster.remoteRoutes(a.cfg.Node, local, a.routableBounds))
	rs := &a.routes
	if slices.Equal(want, rs.applied) && time.Since(rs.syncedAt) < resyncEvery {
		return
	}
	added, deleted, err := forwarding.SyncRemoteRoutes(want)
	a.setErr("remote routes", err)
	if err == nil {
		rs.applied, rs.syncedAt = want, time.Now()
	}
	if len(added) > 0 || len(deleted) > 0 {
		a.log.Info("routes to other nodes' forwarding pods synced", "added", added, "deleted", deleted, "skipped", skipped)
	}
}
