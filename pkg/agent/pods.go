package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/podmeta"
)

var (
	podsResource  = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

// Pods answers the plugin's questions about this node's pods from a
// metadata-only informer (PartialObjectMetadata: no spec, no status) with
// the field selector spec.nodeName, and with one metadata-only LIST on a
// miss (a pod the watch has not delivered yet), selected by name and by
// spec.nodeName so that the API server answers only for this node's pods.
// It answers only the podwire.io/* annotations: the plugin needs no
// other, and a pod's other annotations may hold secrets of its owner. The
// cache keeps no more than that (podwireMeta): a pod may carry 256 KiB of
// annotations and managedFields, written by its tenant.
type Pods struct {
	client   metadata.Interface
	node     string
	informer cache.SharedIndexInformer
}

// NewPods builds the informer of node's pods; Run starts it.
func NewPods(client metadata.Interface, node string, resync time.Duration) *Pods {
	inf := metadatainformer.NewFilteredMetadataInformer(client, podsResource, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + node })
	i := inf.Informer()
	_ = i.SetTransform(podwireMeta)
	return &Pods{client: client, node: node, informer: i}
}

// podwireMeta is the transform of the pod and Node informers: what the
// agent reads of an object (its namespace, name, UID, resourceVersion,
// deletionTimestamp and podwire.io/* annotations) and nothing else, so
// that the cache's size per object does not follow what others write on
// it (a pod's tenant, a Node's kubelet).
func podwireMeta(o any) (any, error) {
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return o, nil // a tombstone
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp, Annotations: podwireAnnotations(m.Annotations),
	}}, nil
}

// Run runs the informer until ctx ends.
func (p *Pods) Run(ctx context.Context) { p.informer.Run(ctx.Done()) }

// Synced reports whether the informer has listed the node's pods once.
func (p *Pods) Synced() bool { return p.informer.HasSynced() }

// Cached is the number of pods in the informer's cache.
func (p *Pods) Cached() int { return len(p.informer.GetStore().ListKeys()) }

// Annotations answers an agentapi.OpPod request: the pod's podwire.io/*
// annotations when it runs on this node and its UID is uid (required). A
// cached pod with another UID may be a stale copy of a recreated pod, so it
// is asked again from the API. Codes: 7 without a namespace, name or UID;
// 11 when the API cannot answer; 999 when it says no (no such pod on this
// node, forbidden, UID mismatch).
func (p *Pods) Annotations(ctx context.Context, namespace, name, uid string) *agentapi.Response {
	resp, _ := p.lookup(ctx, namespace, name, uid)
	return resp
}

// lookup is Annotations, with the refusal reason of a failed answer
// (Refusal*; "" on success) for podwire_refusals_total.
func (p *Pods) lookup(ctx context.Context, namespace, name, uid string) (*agentapi.Response, string) {
	if namespace == "" || name == "" || uid == "" {
		return &agentapi.Response{Code: types.ErrInvalidNetworkConfig,
			Error: "pod namespace, name and UID (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID) are required"}, RefusalBadRequest
	}
	if obj, ok, _ := p.informer.GetStore().GetByKey(namespace + "/" + name); ok {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok && string(m.UID) == uid {
			return &agentapi.Response{Annotations: podwireAnnotations(m.Annotations), Source: "informer"}, ""
		}
	}
	m, err := p.get(ctx, namespace, name)
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
	if m == nil {
		return &agentapi.Response{Code: types.ErrInternal, Error: fmt.Sprintf(
			"the Kubernetes API has no pod %s/%s on node %s: refusing another node's pod", namespace, name, p.node)}, RefusalNotFound
	}
	if string(m.UID) != uid {
		return &agentapi.Response{Code: types.ErrInternal, Error: fmt.Sprintf(
			"pod %s/%s in the Kubernetes API has UID %s, not K8S_POD_UID %s: refusing another pod's annotations",
			namespace, name, m.UID, uid)}, RefusalUIDMismatch
	}
	return &agentapi.Response{Annotations: podwireAnnotations(m.Annotations), Source: "get"}, ""
}

// get reads pod namespace/name from the API when it is on this node: one
// metadata-only LIST selected by metadata.name and spec.nodeName (a GET
// cannot be, and a metadata GET has no spec to check), so the answer for
// another node's pod is nil as for no pod at all. RBAC: list pods, which
// the informer needs anyway.
func (p *Pods) get(ctx context.Context, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	l, err := p.client.Resource(podsResource).Namespace(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("metadata.name", name),
			fields.OneTermEqualSelector("spec.nodeName", p.node)).String(),
	})
	if err != nil {
		return nil, err
	}
	for i := range l.Items {
		if l.Items[i].Name == name { // whatever the server did with the selector
			return &l.Items[i], nil
		}
	}
	return nil, nil
}

// podwireAnnotations is the subset of ann the plugin reads (nil when
// none): the podwire.io/* annotations, and Multus's network selection,
// whose interface names the plugin's VLAN interface must not take.
func podwireAnnotations(ann map[string]string) map[string]string {
	var out map[string]string
	for k, v := range ann {
		if strings.HasPrefix(k, podwirePrefix) || k == podmeta.AnnotationMultusNetworks {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// podwirePrefix is the prefix of the annotations the plugin reads.
const podwirePrefix = "podwire.io/"

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
