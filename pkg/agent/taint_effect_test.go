package agent

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestStartupTaintEffect: the agent removes the startup taint whatever its
// effect (nodes are registered with NoExecute) and leaves the node's other
// taints; it puts the taint back with the configured effect, NoSchedule
// when none is configured.
func TestStartupTaintEffect(t *testing.T) {
	other := corev1.Taint{Key: "example.com/dedicated", Value: "nf", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name       string
		registered corev1.TaintEffect // "" for a node without the taint
		configured corev1.TaintEffect
		on         bool
		want       []corev1.Taint
	}{
		{name: "registered NoExecute, removed", registered: corev1.TaintEffectNoExecute, want: []corev1.Taint{other}},
		{name: "registered NoSchedule, removed", registered: corev1.TaintEffectNoSchedule, want: []corev1.Taint{other}},
		{name: "put back, default effect", on: true,
			want: []corev1.Taint{other, {Key: DefaultStartupTaint, Effect: corev1.TaintEffectNoSchedule}}},
		{name: "put back NoExecute", configured: corev1.TaintEffectNoExecute, on: true,
			want: []corev1.Taint{other, {Key: DefaultStartupTaint, Effect: corev1.TaintEffectNoExecute}}},
		{name: "kept with its registered effect", registered: corev1.TaintEffectNoExecute, configured: corev1.TaintEffectNoSchedule, on: true,
			want: []corev1.Taint{other, {Key: DefaultStartupTaint, Effect: corev1.TaintEffectNoExecute}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7"}}
			node.Spec.Taints = []corev1.Taint{other}
			if tc.registered != "" {
				node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: DefaultStartupTaint, Effect: tc.registered})
			}
			cs := fake.NewSimpleClientset(node)
			a := &Agent{cfg: Config{Node: "n1", Taint: Taint{Key: DefaultStartupTaint, Effect: tc.configured, Nodes: cs.CoreV1()}}}
			changed, _, err := a.setTaint(context.Background(), tc.on)
			if err != nil {
				t.Fatal(err)
			}
			if want := (tc.registered != "") != tc.on; changed != want {
				t.Errorf("changed %v, want %v", changed, want)
			}
			got, err := cs.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Spec.Taints) != len(tc.want) {
				t.Fatalf("taints %+v, want %+v", got.Spec.Taints, tc.want)
			}
			for i, w := range tc.want {
				if g := got.Spec.Taints[i]; g.Key != w.Key || g.Value != w.Value || g.Effect != w.Effect {
					t.Errorf("taint %d: %+v, want %+v", i, g, w)
				}
			}
		})
	}
}
