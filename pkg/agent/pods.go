package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
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

var (
	podsResource  = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

// Pods answers the plugin's questions about this node's pods from a
// metadata-only informer (PartialObjectMetadata: no spec, no status) with
// the field selector spec.nodeName, and with one metadata-only GET on a miss
// (a pod the watch has not delivered yet).
type Pods struct {
	client   metadata.Interface
	informer cache.SharedIndexInformer
}

// NewPods builds the informer of node's pods; Run starts it.
func NewPods(client metadata.Interface, node string, resync time.Duration) *Pods {
	inf := metadatainformer.NewFilteredMetadataInformer(client, podsResource, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + node })
	return &Pods{client: client, informer: inf.Informer()}
}

// Run runs the informer until ctx ends.
func (p *Pods) Run(ctx context.Context) { p.informer.Run(ctx.Done()) }

// Synced reports whether the informer has listed the node's pods once.
func (p *Pods) Synced() bool { return p.informer.HasSynced() }

// Cached is the number of pods in the informer's cache.
func (p *Pods) Cached() int { return len(p.informer.GetStore().ListKeys()) }

// Annotations answers an agentapi.OpPod request: the pod's annotations when
// its UID is uid (or uid is empty). A cached pod with another UID may be a
// stale copy of a recreated pod, so it is asked again with a GET. Codes: 11
// when the API cannot answer; 999 when it says no (not found, forbidden,
// UID mismatch).
func (p *Pods) Annotations(ctx context.Context, namespace, name, uid string) *agentapi.Response {
	resp, _ := p.lookup(ctx, namespace, name, uid)
	return resp
}

// lookup is Annotations, with the refusal reason of a failed answer
// (Refusal*; "" on success) for podwire_refusals_total.
func (p *Pods) lookup(ctx context.Context, namespace, name, uid string) (*agentapi.Response, string) {
	if namespace == "" || name == "" {
		return &agentapi.Response{Code: types.ErrInvalidNetworkConfig, Error: "pod namespace and name are required"}, RefusalBadRequest
	}
	if obj, ok, _ := p.informer.GetStore().GetByKey(namespace + "/" + name); ok {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok && (uid == "" || string(m.UID) == uid) {
			return &agentapi.Response{Annotations: m.Annotations, Source: "informer"}, ""
		}
	}
	m, err := p.client.Resource(podsResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		code, reason := types.ErrTryAgainLater, RefusalAPI
		if answered(err) {
			code = types.ErrInternal
			if apierrors.IsNotFound(err) {
				reason = RefusalNotFound
			}
		}
		return &agentapi.Response{Code: uint(code), Error: fmt.Sprintf("failed to GET pod %s/%s: %v", namespace, name, err)}, reason
	}
	if uid != "" && string(m.UID) != uid {
		return &agentapi.Response{Code: types.ErrInternal, Error: fmt.Sprintf(
			"pod %s/%s in the Kubernetes API has UID %s, not K8S_POD_UID %s: refusing another pod's annotations",
			namespace, name, m.UID, uid)}, RefusalUIDMismatch
	}
	return &agentapi.Response{Annotations: m.Annotations, Source: "get"}, ""
}

// answered reports whether err is a definite answer of the API server, as
// opposed to one that may change on retry.
func answered(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err)
}
