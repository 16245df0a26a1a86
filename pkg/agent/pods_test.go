package agent

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
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
	c.PrependReactor("list", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sel := action.(k8stesting.ListAction).GetListRestrictions().Fields
		a.selectors = append(a.selectors, sel.String())
		l := &metav1.List{}
		for _, p := range a.pods {
			if sel.Matches(fields.Set{"metadata.name": p.Name, "metadata.namespace": p.Namespace, "spec.nodeName": a.nodes[p.Name]}) {
				l.Items = append(l.Items, runtime.RawExtension{Object: p})
			}
		}
		return true, l, nil
	})
	return c
}

// TestPodsNarrow: the agent answers only for its own node's pods (a pod
// of another node, which the informer never lists, is refused on a miss
// as well), only with podwire.io/* annotations, and only with a UID.
func TestPodsNarrow(t *testing.T) {
	mine := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "nf", Name: "mine", UID: "u-mine", Annotations: map[string]string{
			"podwire.io/forwarding": "true", "example.com/api-token": "secret", "kubectl.kubernetes.io/last-applied-configuration": "{}"}}}
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
	if len(r.Annotations) != 1 || r.Annotations["podwire.io/forwarding"] != "true" {
		t.Errorf("annotations answered %v, want only podwire.io/forwarding", r.Annotations)
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
