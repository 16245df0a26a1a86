package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/podwire/podwire/pkg/nodetables"
)

// Node follows this node's metadata (metadata-only informer, field selector
// metadata.name) and writes its egress annotation into stateDir, where the
// plugin reads it (nodetables.WriteNodeEgress).
type Node struct {
	name     string
	stateDir string
	informer cache.SharedIndexInformer
}

// NewNode builds the informer of the node called name; Run starts it.
func NewNode(client metadata.Interface, name, stateDir string, resync time.Duration) *Node {
	inf := metadatainformer.NewFilteredMetadataInformer(client, nodesResource, metav1.NamespaceAll, resync,
		cache.Indexers{}, func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name })
	i := inf.Informer()
	// The Node's name, UID, resourceVersion (taint.go) and podwire.io/*
	// annotations, as for pods: the rest is written by others.
	_ = i.SetTransform(podwireMeta)
	return &Node{name: name, stateDir: stateDir, informer: i}
}

// Run runs the informer until ctx ends.
func (n *Node) Run(ctx context.Context) { n.informer.Run(ctx.Done()) }

// Synced reports whether the informer has listed the node once.
func (n *Node) Synced() bool { return n.informer.HasSynced() }

// meta is the cached metadata of the node, nil before the first list or
// when the node does not exist.
func (n *Node) meta() *metav1.PartialObjectMetadata {
	obj, ok, _ := n.informer.GetStore().GetByKey(n.name)
	if !ok {
		return nil
	}
	m, _ := obj.(*metav1.PartialObjectMetadata)
	return m
}

// UID is the node's UID, "" when not known yet.
func (n *Node) UID() string {
	if m := n.meta(); m != nil {
		return string(m.UID)
	}
	return ""
}

// WriteEgress writes the node's egress annotation into stateDir when it
// changed; value is the annotation ("" when absent).
func (n *Node) WriteEgress(now time.Time) (value string, changed bool, err error) {
	if !n.Synced() {
		return "", false, nil
	}
	m := n.meta()
	if m == nil {
		return "", false, nil
	}
	value, found := m.Annotations[nodetables.EgressAnnotation]
	changed, err = nodetables.WriteNodeEgress(n.stateDir, n.name, value, found, now)
	return value, changed, err
}

// reconcileEgress writes the node's egress annotation and the cluster's
// pod CIDRs, node IPs and forwarded prefixes (the other Nodes' that pass
// the bounds, and this node's records') into stateDir when they changed;
// a change triggers the node tables' repair, which brings the egress
// table up to date. The cluster's CIDRs written once are part of Ready.
//
// Triggers: the Node changed, the cluster's Nodes changed (the
// informers), a record written or removed; Timing.RepairInterval as a
// backstop.
func (a *Agent) reconcileEgress(context.Context) error {
	v, changed, err := a.api.node.WriteEgress(time.Now())
	if err != nil {
		err = fmt.Errorf("egress annotation: %w", err)
	}
	if changed {
		a.log.Info("node egress annotation written", "value", v)
	}
	a.st.mu.Lock()
	a.st.status.EgressIPs = v
	a.st.mu.Unlock()
	clusterChanged, clusterErr := a.writeCluster()
	if changed || clusterChanged {
		a.repairDue(0)
	}
	return errors.Join(err, clusterErr)
}

// writeCluster writes the cluster's CIDRs (ClusterNodes.Write) and says
// whether they changed.
func (a *Agent) writeCluster() (bool, error) {
	nodes := a.cfg.Cluster.Nodes
	if nodes == nil {
		return false, nil
	}
	_, local, err := a.recordRoutes()
	if err != nil {
		return false, fmt.Errorf("cluster CIDRs: %w", err)
	}
	r, changed, err := nodes.Write(a.cfg.Node, local, a.routableBounds)
	if err != nil {
		return false, fmt.Errorf("cluster CIDRs: %w", err)
	}
	if nodes.Synced() {
		a.st.mu.Lock()
		a.st.clusterWritten = true
		a.st.mu.Unlock()
	}
	if changed {
		// Counts: the lists hold a prefix or two per Node, and a line
		// per change would grow with the cluster (stateDir's
		// cluster-cidrs.cache holds them).
		a.log.Info("cluster CIDRs written", "nodes", r.Nodes, "podCIDRs", len(r.PodCIDRs), "nodeIPs", len(r.NodeIPs), "routes", len(r.Routes))
	}
	return changed, nil
}

// onChange calls f (which must not block) after every add, update or
// delete the informer delivers.
func onChange(inf cache.SharedIndexInformer, f func()) {
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f() },
		UpdateFunc: func(any, any) { f() },
		DeleteFunc: func(any) { f() },
	})
}
