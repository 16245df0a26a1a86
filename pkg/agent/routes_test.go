package agent

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestRemoteRoutesRefused: what another Node publishes is routed only
// inside this node's forwarding.routablePrefixes, never over a pod CIDR, a
// node IP or a prefix served here, and never as a default route; the
// bounds are read only when some Node publishes a prefix.
func TestRemoteRoutesRefused(t *testing.T) {
	node := func(name, podCIDR, ip, routes string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Spec.PodCIDRs = []string{podCIDR}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		if routes != "" {
			n.Annotations = map[string]string{NodeRoutesAnnotation: routes}
		}
		return n
	}
	c := &ClusterNodes{informer: cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Node{}, 0, cache.Indexers{})}
	_ = c.informer.GetStore().Add(node("a", "10.244.0.0/24", "10.99.0.11", ""))
	reads := 0
	bounds := func() ([]netip.Prefix, error) {
		reads++
		return []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("198.51.100.0/24")}, nil
	}
	local := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	if want, _ := c.remoteRoutes("a", local, bounds); len(want) != 0 || reads != 0 {
		t.Fatalf("no Node publishes: routes %v, bounds read %d times", want, reads)
	}
	_ = c.informer.GetStore().Add(node("b", "10.244.1.0/24", "10.99.0.12",
		"0.0.0.0/0,10.244.1.0/25,10.99.0.12/32,198.51.100.0/24,203.0.113.0/24"))
	want, skipped := c.remoteRoutes("a", local, bounds)
	if len(want) != 0 {
		t.Errorf("routed %v, want nothing", want)
	}
	for _, w := range []string{
		"0.0.0.0/0 of node b: outside forwarding.routablePrefixes",
		"10.244.1.0/25 of node b: a default route or overlaps a pod CIDR or node IP",
		"10.99.0.12/32 of node b: a default route or overlaps a pod CIDR or node IP",
		"198.51.100.0/24 of node b: served by this node",
		"203.0.113.0/24 of node b: outside forwarding.routablePrefixes",
	} {
		if !strings.Contains(strings.Join(skipped, "\n"), w) {
			t.Errorf("skipped %q, want a line with %q", skipped, w)
		}
	}
	if reads != 1 {
		t.Errorf("bounds read %d times, want once", reads)
	}
	_, skipped = c.remoteRoutes("a", nil, func() ([]netip.Prefix, error) { return nil, errors.New("no entry") })
	if len(skipped) != 5 || !strings.Contains(skipped[0], "routablePrefixes unknown: no entry") {
		t.Errorf("without bounds: skipped %q, want all five refused naming why", skipped)
	}
}
