package podmeta

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
	"k8s.io/client-go/tools/clientcmd"
)

// podsResource is the core/v1 pods resource.
var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// APIFetcher is the API fallback: one metadata-only GET of the pod
// (PartialObjectMetadata, no spec or status) with client-go's metadata
// client, so podwire carries neither the typed clientset nor the pod schema.
type APIFetcher struct {
	client  metadata.Interface
	timeout time.Duration
}

var _ Fetcher = (*APIFetcher)(nil)

// NewAPIFetcher builds a fetcher from a kubeconfig file. Every request is
// bounded by timeout (the client's own timeout and the context's deadline).
func NewAPIFetcher(kubeconfig string, timeout time.Duration) (*APIFetcher, error) {
	c, err := NewMetadataClient(kubeconfig, timeout)
	if err != nil {
		return nil, err
	}
	return &APIFetcher{client: c, timeout: timeout}, nil
}

// NewMetadataClient builds client-go's metadata client (metadata-only GETs)
// from a kubeconfig file, every request bounded by timeout. It is shared by
// the pod fallback and the node egress annotation (pkg/nodetables).
func NewMetadataClient(kubeconfig string, timeout time.Duration) (metadata.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("failed to load kubeconfig %q: %w", kubeconfig, err)
	}
	cfg.Timeout = timeout
	cfg.UserAgent = "podwire-cni"
	c, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to build the metadata client from %q: %w", kubeconfig, err)
	}
	return c, nil
}

// PodAnnotations GETs the metadata of pod id. It refuses a pod whose UID is
// not id.UID (the name now belongs to another pod). Errors: CNI error 11 (try
// again later) when the API cannot answer (unreachable, timeout, throttled,
// server error); CNI error 999 when it answers no (not found, forbidden) or
// the UID differs.
func (f *APIFetcher) PodAnnotations(ctx context.Context, id Identity) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	obj, err := f.client.Resource(podsResource).Namespace(id.Namespace).Get(ctx, id.Name, metav1.GetOptions{})
	if err != nil {
		msg := fmt.Sprintf("failed to read the annotations of pod %s from the Kubernetes API", id)
		if answered(err) {
			return nil, types.NewError(types.ErrInternal, msg, err.Error())
		}
		return nil, types.NewError(types.ErrTryAgainLater, msg, err.Error())
	}
	if id.UID != "" && string(obj.UID) != id.UID {
		return nil, types.NewError(types.ErrInternal, fmt.Sprintf(
			"pod %s in the Kubernetes API has UID %s, not K8S_POD_UID %s: refusing another pod's annotations",
			id, obj.UID, id.UID), "")
	}
	return obj.Annotations, nil
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
