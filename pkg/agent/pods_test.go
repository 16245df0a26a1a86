package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/metadata/metadatainformer"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// apiPods is a fake API server's pods on their nodes: it answers a LIST
// of pods by its field selector (metadata.name, spec.nodeName) as the real
// one does, which client-go's metadata fake does not (PartialObjectMetadata
// has no spec). The selectors it saw are in selectors.
type apiPods struct {
	pods      []*metav1.PartialObjectMetadata
	nodes     map[string]string // pod name → node
	selectors []string
}

func (a *apiPods) client(t *testing.T) *metadatafake.FakeMetadataClient {
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := metadatafake.NewSimpleMetadataClient(scheme)
	c.PrependReactor("list", "pods", func(action k8stesting.Action) (bool, kruntime.Object, error) {
		sel := action.(k8stesting.ListAction).GetListRestrictions().Fields
		a.selectors = append(a.selectors, sel.String())
		l := &metav1.List{}
		for _, p := range a.pods {
			if sel.Matches(fields.Set{"metadata.name": p.Name, "metadata.namespace": p.Namespace, "spec.nodeName": a.nodes[p.Name]}) {
				l.Items = append(l.Items, kruntime.RawExtension{Object: p})
			}
		}
		return true, l, nil
	})
	return c
}

// TestPodsNarrow: the agent answers only for its own node's pods (a pod
// of another node, which the informer never lists, is refused on a miss
// as well), only with podwire.io/* annotations and Multus's network
// selection, and only with a UID.
func TestPodsNarrow(t *testing.T) {
	mine := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "nf", Name: "mine", UID: "u-mine", Annotations: map[string]string{
			"podwire.io/forwarding": "true", "example.com/api-token": "secret", "kubectl.kubernetes.io/last-applied-configuration": "{}",
			"k8s.v1.cni.cncf.io/networks": "nf/macvlan-a"}}}
	theirs := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "nf", Name: "theirs", UID: "u-theirs", Annotations: map[string]string{
			"podwire.io/forwarding": "true"}}}
	api := &apiPods{pods: []*metav1.PartialObjectMetadata{mine, theirs}, nodes: map[string]string{"mine": "worker-1", "theirs": "worker-2"}}
	p := NewPods(api.client(t), "worker-1", 0) // not running: every answer is from the API
	ctx := context.Background()

	r, reason := p.lookup(ctx, "nf", "mine", "u-mine")
	if r.Code != 0 || reason != "" {
		t.Fatalf("this node's pod: %+v (%s)", r, reason)
	}
	if len(r.Annotations) != 2 || r.Annotations["podwire.io/forwarding"] != "true" || r.Annotations["k8s.v1.cni.cncf.io/networks"] != "nf/macvlan-a" {
		t.Errorf("annotations answered %v, want only podwire.io/forwarding and k8s.v1.cni.cncf.io/networks", r.Annotations)
	}
	if want := "metadata.name=mine,spec.nodeName=worker-1"; len(api.selectors) != 1 || api.selectors[0] != want {
		t.Errorf("the API was asked %q, want one LIST with %q", api.selectors, want)
	}

	r, reason = p.lookup(ctx, "nf", "theirs", "u-theirs")
	if r.Code != 999 || reason != RefusalNotFound || !strings.Contains(r.Error, "worker-1") || r.Annotations != nil {
		t.Errorf("another node's pod: %+v (%s), want code 999 naming this node, no annotations", r, reason)
	}

	r, reason = p.lookup(ctx, "nf", "mine", "")
	if r.Code != 7 || reason != RefusalBadRequest || !strings.Contains(r.Error, "K8S_POD_UID") || r.Annotations != nil {
		t.Errorf("no UID: %+v (%s), want code 7 naming K8S_POD_UID", r, reason)
	}
}

// TestInformerCacheBounded: the pod informer's cache holds what podwire
// reads, not what a tenant writes: 110 pods of one node, each with 250 KiB
// of other annotations and managedFields, patched in a loop, take under
// 512 bytes each in the cache (their JSON encoding). The control is the
// same informer without the transform, which holds them whole (over
// 250 KiB each): what the agent's cache held before.
func TestInformerCacheBounded(t *testing.T) {
	const pods, other = 110, 250 << 10
	perPod := func(transform bool) int {
		scheme := metadatafake.NewTestScheme()
		if err := metav1.AddMetaToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		c := metadatafake.NewSimpleMetadataClient(scheme)
		gvr := podsResource
		pod := func(i, round int) *metav1.PartialObjectMetadata {
			return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
				ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: fmt.Sprintf("p%d", i), UID: ktypes.UID(fmt.Sprintf("u%d", i)),
					ResourceVersion: fmt.Sprint(round),
					Annotations: map[string]string{"podwire.io/forwarding": "true",
						"example.com/blob": strings.Repeat(string(rune('a'+round%26)), other)},
					ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "tenant", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}}}}}
		}
		for i := range pods {
			if err := c.Tracker().Add(pod(i, 0)); err != nil {
				t.Fatal(err)
			}
		}
		p := NewPods(c, "worker-1", 0)
		if !transform {
			p = &Pods{client: c, node: "worker-1", informer: metadatainformer.NewFilteredMetadataInformer(c, podsResource, metav1.NamespaceAll, 0,
				cache.Indexers{}, nil).Informer()}
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go p.Run(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), p.Synced) {
			t.Fatal("not synced")
		}
		// Patched in a loop: every pod twice more, each time a new blob,
		// in steps the fake's watch buffer (100 events) holds.
		seen := func(i, round int) {
			for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				o, ok, _ := p.informer.GetStore().GetByKey(fmt.Sprintf("tenant/p%d", i))
				if ok && o.(*metav1.PartialObjectMetadata).ResourceVersion == fmt.Sprint(round) {
					return
				}
				if time.Now().After(end) {
					t.Fatalf("the patch of round %d of pod %d never reached the cache", round, i)
				}
			}
		}
		for round := 1; round <= 2; round++ {
			for i := range pods {
				if err := c.Tracker().Update(gvr, pod(i, round), "tenant"); err != nil {
					t.Fatal(err)
				}
				if i%50 == 49 || i == pods-1 {
					seen(i, round)
				}
			}
		}
		if r := p.Annotations(ctx, "tenant", "p0", "u0"); r.Source != "informer" || len(r.Annotations) != 1 {
			t.Fatalf("answer %+v, want podwire.io/forwarding from the informer", r)
		}
		// The fake shares its strings with the cache (a deep copy copies
		// no string bytes), so the heap cannot tell; the encoding of what
		// the cache holds can.
		var size int
		objs := p.informer.GetStore().List()
		for _, o := range objs {
			b, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			size += len(b)
		}
		if len(objs) != pods {
			t.Fatalf("%d pods cached, want %d", len(objs), pods)
		}
		return size / pods
	}
	with, without := perPod(true), perPod(false)
	t.Logf("pod informer's cache per pod (JSON bytes): %d with the transform, %d without (%d pods, %d KiB of other annotations each)",
		with, without, pods, other>>10)
	if with > 512 {
		t.Errorf("the transformed cache holds %d bytes per pod, want under 512", with)
	}
	if without < other {
		t.Errorf("control: the whole-object cache holds %d bytes per pod, want over %d (else this test proves nothing)", without, other)
	}
}

// TestNamespaceTransform: the namespace cache keeps name, UID and labels.
func TestNamespaceTransform(t *testing.T) {
	in := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "nf", UID: "u", Labels: map[string]string{"tier": "nf"},
		Annotations: map[string]string{"x": strings.Repeat("x", 1000)}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	o, _ := slimNamespace(in)
	m := o.(*metav1.PartialObjectMetadata)
	if m.Name != "nf" || m.UID != "u" || m.Labels["tier"] != "nf" || m.Annotations != nil || m.ManagedFields != nil {
		t.Errorf("slimNamespace kept %+v", m.ObjectMeta)
	}
}
