package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podwire/podwire/pkg/nodestatus"
)

// agentPod is an agent pod on node, Ready or not, whose container started
// at started.
func agentPod(node string, ready bool, started time.Time) *corev1.Pod {
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "podwire-agent-" + node},
		Spec:       corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "agent",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}},
		},
	}
}

// healthyReport is a report that finds nothing wrong, written at at.
func healthyReport(at time.Time) *nodestatus.Status {
	return &nodestatus.Status{Updated: at, Agent: nodestatus.Agent{Ready: true}, Chain: nodestatus.Chain{InChain: true},
		Tables: nodestatus.Tables{Verified: true}}
}

// TestViews: a node is healthy when the DaemonSet's template does not
// select it, or when its agent pod is Ready and its report finds nothing
// wrong; each other case names the node's problem.
func TestViews(t *testing.T) {
	now := time.Now()
	started := now.Add(-time.Hour)
	node := func(name string, labels map[string]string) metav1.PartialObjectMetadata {
		return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	linux := map[string]string{"kubernetes.io/os": "linux"}
	outOfChain := healthyReport(now)
	outOfChain.Chain = nodestatus.Chain{Reason: "10-flannel.conflist has no podwire entry"}
	unchecked := healthyReport(now)
	unchecked.Counts.Unchecked = 2
	s := &snapshot{
		nodes: []metav1.PartialObjectMetadata{node("ok", linux), node("windows", map[string]string{"kubernetes.io/os": "windows"}),
			node("no-pod", linux), node("not-ready", linux), node("out-of-chain", linux), node("unchecked", linux),
			node("silent", linux), node("stale", linux)},
		ds: &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/os": "linux"}}}}},
		pods: map[string]*corev1.Pod{
			"ok": agentPod("ok", true, started), "not-ready": agentPod("not-ready", false, started),
			"out-of-chain": agentPod("out-of-chain", true, started), "unchecked": agentPod("unchecked", true, started),
			"silent": agentPod("silent", true, started), "stale": agentPod("stale", true, now.Add(-time.Minute)),
		},
		statuses: map[string]*nodestatus.Status{
			"ok": healthyReport(now), "not-ready": healthyReport(now), "out-of-chain": outOfChain, "unchecked": unchecked,
			"stale": healthyReport(now.Add(-2 * time.Hour)),
		},
	}
	views, err := s.views(now)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // node: a word of its problem ("" healthy)
		"ok": "", "windows": "", "no-pod": "no podwire agent pod", "not-ready": "not Ready",
		"out-of-chain": "10-flannel.conflist has no podwire entry", "unchecked": "2 attachments whose sources cannot be checked",
		"silent": "has not reported", "stale": "has not reported",
	}
	var names []string
	for _, v := range views {
		names = append(names, v.Node)
		w := want[v.Node]
		switch {
		case w == "" && !v.Healthy:
			t.Errorf("%s: not healthy: %q", v.Node, v.Problems)
		case w != "" && (v.Healthy || !strings.Contains(strings.Join(v.Problems, "\n"), w)):
			t.Errorf("%s: problems %q, want one naming %q", v.Node, v.Problems, w)
		}
	}
	if !slices.IsSorted(names) || len(names) != len(want) {
		t.Errorf("nodes %v", names)
	}
}
