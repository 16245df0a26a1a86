package agent

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/podwire/podwire/pkg/agentapi"
)

var namespacesResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// Namespaces answers the plugin's OpNamespace (a namespace's labels, for
// the gates that select namespaces by label: forwarding.namespaceSelector,
// vlanGrants[].namespaceSelector) from a metadata-only informer of the
// cluster's namespaces, with a metadata GET on a miss (a namespace created
// since the last event). The cache keeps a namespace's name, UID and
// labels only (slimNamespace). RBAC: get, list and watch namespaces.
type Namespaces struct {
	client   metadata.Interface
	informer cache.SharedIndexInformer
	// gen counts the cache's changes of labels, bumped by the informer's
	// handlers (reconcileGates looks again only then).
	gen atomic.Uint64
}

// NewNamespaces builds the informer; Run starts it.
func NewNamespaces(client metadata.Interface, resync time.Duration) *Namespaces {
	inf := metadatainformer.NewFilteredMetadataInformer(client, namespacesResource, metav1.NamespaceAll, resync,
		cache.Indexers{}, nil)
	i := inf.Informer()
	_ = i.SetTransform(slimNamespace)
	n := &Namespaces{client: client, informer: i}
	_, _ = i.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { n.gen.Add(1) },
		UpdateFunc: func(o, m any) {
			a, ok1 := o.(*metav1.PartialObjectMetadata)
			b, ok2 := m.(*metav1.PartialObjectMetadata)
			if !ok1 || !ok2 || !maps.Equal(a.Labels, b.Labels) {
				n.gen.Add(1)
			}
		},
		DeleteFunc: func(any) { n.gen.Add(1) },
	})
	return n
}

// cachedLabels is namespace name's labels as the cache holds them (false
// when it holds no such namespace).
func (n *Namespaces) cachedLabels(name string) (map[string]string, bool) {
	obj, ok, _ := n.informer.GetStore().GetByKey(name)
	if !ok {
		return nil, false
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return nil, false
	}
	return m.Labels, true
}

// slimNamespace is the namespace informer's transform: its name, UID and
// labels (what the gates select by), without annotations or managedFields.
func slimNamespace(o any) (any, error) {
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return o, nil // a tombstone
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion, Labels: m.Labels,
	}}, nil
}

// Run runs the informer until ctx ends.
func (n *Namespaces) Run(ctx context.Context) { n.informer.Run(ctx.Done()) }

// Synced reports whether the informer has listed the namespaces once.
func (n *Namespaces) Synced() bool { return n.informer.HasSynced() }

// Labels answers an OpNamespace request: the labels of namespace name.
// Codes: 7 without a name; 11 when the API cannot answer; 999 when it says
// no (no such namespace, forbidden).
func (n *Namespaces) Labels(ctx context.Context, name string) *agentapi.Response {
	if name == "" {
		return &agentapi.Response{Code: types.ErrInvalidNetworkConfig, Error: "a namespace (K8S_POD_NAMESPACE) is required"}
	}
	if obj, ok, _ := n.informer.GetStore().GetByKey(name); ok {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			return &agentapi.Response{Labels: maps.Clone(m.Labels), Source: "informer"}
		}
	}
	m, err := n.client.Resource(namespacesResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		code := uint(types.ErrTryAgainLater)
		if answered(err) {
			code = types.ErrInternal
		}
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("no such namespace")
		}
		return &agentapi.Response{Code: code, Error: fmt.Sprintf("failed to GET namespace %s: %v", name, err)}
	}
	return &agentapi.Response{Labels: maps.Clone(m.Labels), Source: "get"}
}
