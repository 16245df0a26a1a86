package nodetables

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/podmeta"
)

// EgressAnnotation is the node annotation with the node's egress IPs:
// "203.0.113.10,2001:db8::10" (plain addresses, the first of each family is
// used, as for egress.ips).
const EgressAnnotation = "podwire.io/egress-ip"

// CacheTTL is how long the cached annotation is used without asking the API
// again: steady-state ADDs make no API call, and a changed annotation reaches
// the tables within CacheTTL (on the next ADD after it).
const CacheTTL = 10 * time.Minute

// NodeGetter reads a node's annotations from the Kubernetes API: the seam for
// tests. found is false when the API says the node does not exist.
type NodeGetter interface {
	NodeAnnotations(ctx context.Context, node string) (ann map[string]string, found bool, err error)
}

// NodeName is the Kubernetes name of this node: nodeName from the config,
// else the host name in lower case (the kubelet's default).
func NodeName(conf *config.NetConf) (string, error) {
	if conf.NodeName != "" {
		return conf.NodeName, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("failed to read the host name (set nodeName): %w", err)
	}
	return strings.ToLower(h), nil
}

// RefreshNodeEgress makes sure stateDir caches a recent answer for the node's
// egress annotation (egress.nodeAnnotation): nothing to do while the cache is
// younger than CacheTTL and for this node; otherwise one metadata-only GET of
// the node through getter (built lazily, so a fresh cache never loads the
// kubeconfig). When the API cannot answer, a stale cache is kept and reported
// in warn; with no cache at all it is CNI error 11 (try again later): an ADD
// must not guess the egress IP. fetched tells whether the API was asked.
func RefreshNodeEgress(ctx context.Context, conf *config.NetConf, getter func() (NodeGetter, error), now time.Time) (fetched bool, warn string, err error) {
	if !conf.EgressEnabled() || !conf.Egress.NodeAnnotation {
		return false, "", nil
	}
	node, err := NodeName(conf)
	if err != nil {
		return false, "", err
	}
	old, cerr := readCache(conf.StateDir)
	if cerr == nil && old != nil && old.Node == node && now.Sub(old.Fetched) >= 0 && now.Sub(old.Fetched) < CacheTTL {
		return false, "", nil
	}
	g, err := getter()
	var ann map[string]string
	found := false
	if err == nil {
		ann, found, err = g.NodeAnnotations(ctx, node)
	}
	if err != nil {
		if old != nil && old.Node == node {
			return true, fmt.Sprintf("egress.nodeAnnotation: cannot read node %s (%v): using the annotation read at %s",
				node, err, old.Fetched.Format(time.RFC3339)), nil
		}
		return true, "", types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("failed to read annotation %s of node %s from the Kubernetes API", EgressAnnotation, node), err.Error())
	}
	c := &nodeCache{Node: node, Fetched: now.UTC()}
	switch v, ok := ann[EgressAnnotation]; {
	case !found:
		c.Warnings = append(c.Warnings, fmt.Sprintf("egress.nodeAnnotation: node %s not found in the Kubernetes API (set nodeName)", node))
	case !ok:
		c.Warnings = append(c.Warnings, fmt.Sprintf("egress.nodeAnnotation: node %s has no %s annotation", node, EgressAnnotation))
	default:
		c.Found, c.Value = true, v
		c.V4, c.V6, c.Warnings = ParseEgressAnnotation(v)
	}
	return true, "", writeCache(conf.StateDir, c)
}

// ParseEgressAnnotation parses "203.0.113.10,2001:db8::10": the first IPv4 and
// the first IPv6 global unicast address; anything else (a second address of a
// family, a CIDR, garbage) is skipped with a warning, since a node annotation
// is not the pod's to fix and must not stop every ADD on the node.
func ParseEgressAnnotation(v string) (v4, v6 netip.Addr, warnings []string) {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		a, err := config.ParseAddr(f)
		switch {
		case err != nil:
			warnings = append(warnings, fmt.Sprintf("annotation %s: %q ignored: %v", EgressAnnotation, f, err))
		case !a.IsGlobalUnicast():
			warnings = append(warnings, fmt.Sprintf("annotation %s: %q ignored: not a global unicast address", EgressAnnotation, f))
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !v6.IsValid():
			v6 = a
		default:
			warnings = append(warnings, fmt.Sprintf("annotation %s: %q ignored: only the first egress IP of each family is used", EgressAnnotation, f))
		}
	}
	return v4, v6, warnings
}

// nodesResource is the core/v1 nodes resource.
var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// apiNodes reads node metadata with client-go's metadata client.
type apiNodes struct {
	client  metadata.Interface
	timeout time.Duration
}

// NewNodeGetter builds the API NodeGetter from a kubeconfig (the client of
// podmeta.NewMetadataClient), every GET bounded by timeout.
func NewNodeGetter(kubeconfig string, timeout time.Duration) (NodeGetter, error) {
	c, err := podmeta.NewMetadataClient(kubeconfig, timeout)
	if err != nil {
		return nil, err
	}
	return &apiNodes{client: c, timeout: timeout}, nil
}

func (a *apiNodes) NodeAnnotations(ctx context.Context, node string) (map[string]string, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	obj, err := a.client.Resource(nodesResource).Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return obj.Annotations, true, nil
}
