package agent

import (
	"context"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/podwire/podwire/pkg/nodetables"
)

// ClusterNodes follows every Node of the cluster for the ranges the egress
// table excepts (nodetables.Cluster): spec.podCIDRs, the InternalIP
// addresses and the prefixes each node's forwarding pods serve
// (NodeRoutesAnnotation, which routes.go also routes to). It is the
// agent's one informer that is not metadata-only, since podCIDRs live in
// the spec; a transform keeps nothing of a Node but
// its name and those fields, so the cache costs a few hundred bytes per
// node. RBAC: list and watch nodes, which the agent already has.
type ClusterNodes struct {
	stateDir string
	informer cache.SharedIndexInformer
}

// NewClusterNodes builds the informer over core, a REST client of the
// core/v1 API group (the typed CoreV1 client's RESTClient()); Run starts it.
func NewClusterNodes(core rest.Interface, stateDir string, resync time.Duration) *ClusterNodes {
	lw := cache.NewListWatchFromClient(core, "nodes", metav1.NamespaceAll, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, resync, cache.Indexers{})
	inf.SetTransform(func(o any) (any, error) {
		n, ok := o.(*corev1.Node)
		if !ok {
			return o, nil // a tombstone
		}
		slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}}
		if v, ok := n.Annotations[NodeRoutesAnnotation]; ok {
			slim.Annotations = map[string]string{NodeRoutesAnnotation: v}
		}
		slim.Spec.PodCIDRs = n.Spec.PodCIDRs
		if len(slim.Spec.PodCIDRs) == 0 && n.Spec.PodCIDR != "" {
			slim.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				slim.Status.Addresses = append(slim.Status.Addresses, a)
			}
		}
		return slim, nil
	})
	return &ClusterNodes{stateDir: stateDir, informer: inf}
}

// Run runs the informer until ctx ends.
func (c *ClusterNodes) Run(ctx context.Context) { c.informer.Run(ctx.Done()) }

// Synced reports whether the informer has listed the Nodes once.
func (c *ClusterNodes) Synced() bool { return c.informer.HasSynced() }

// Ranges is the cluster's pod CIDRs and node IPs as the cache holds them
// now; what does not parse is skipped (the apiserver validates both).
func (c *ClusterNodes) Ranges() nodetables.Cluster {
	var out nodetables.Cluster
	for _, o := range c.informer.GetStore().List() {
		n, ok := o.(*corev1.Node)
		if !ok {
			continue
		}
		out.Nodes++
		for _, s := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(s); err == nil {
				out.PodCIDRs = append(out.PodCIDRs, p.Masked())
			}
		}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				ip = ip.Unmap()
				out.NodeIPs = append(out.NodeIPs, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
		rs, _ := parseNodeRoutes(n.Annotations[NodeRoutesAnnotation])
		out.Routes = append(out.Routes, rs...)
	}
	slices.SortFunc(out.PodCIDRs, comparePrefix)
	slices.SortFunc(out.NodeIPs, comparePrefix)
	slices.SortFunc(out.Routes, comparePrefix)
	out.PodCIDRs = slices.Compact(out.PodCIDRs)
	out.NodeIPs = slices.Compact(out.NodeIPs)
	out.Routes = slices.Compact(out.Routes)
	return out
}

// Write writes Ranges into stateDir when the informer has synced and they
// changed (nodetables.WriteCluster).
func (c *ClusterNodes) Write() (r nodetables.Cluster, changed bool, err error) {
	if !c.Synced() {
		return r, false, nil
	}
	r = c.Ranges()
	changed, err = nodetables.WriteCluster(c.stateDir, r)
	return r, changed, err
}
