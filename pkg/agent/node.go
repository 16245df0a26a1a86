package agent

import (
	"context"
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
