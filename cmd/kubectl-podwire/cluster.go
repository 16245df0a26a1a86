package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/pager"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/podwire/podwire/pkg/nodestatus"
)

// agentLabel is the label of podwire's DaemonSet (the chart's).
const agentLabel = "app.kubernetes.io/name=podwire-agent"

var (
	nodeStatuses = schema.GroupVersionResource{Group: nodestatus.Group, Version: nodestatus.Version, Resource: nodestatus.Resource}
	nodesGVR     = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

// nodeView is what status prints of one node.
type nodeView struct {
	Node    string `json:"node"`
	Healthy bool   `json:"healthy"`
	// Problems say why the node is not healthy, one sentence each.
	Problems []string `json:"problems,omitempty"`
	// Selected: the DaemonSet's pod template selects the node (its
	// nodeSelector and required node affinity), so an agent should run
	// there; a node not selected is healthy without one.
	Selected bool `json:"selected"`
	// AgentPod is the agent's pod on the node ("" when there is none),
	// AgentReady its Ready condition (the agent's /readyz, as the kubelet
	// probes it).
	AgentPod   string `json:"agentPod,omitempty"`
	AgentReady bool   `json:"agentReady"`
	// Status is the agent's last report (nil: none), without its pods
	// (`kubectl podwire pods` lists them).
	Status *nodestatus.Status `json:"status,omitempty"`
}

// snapshot is what the commands read of the cluster.
type snapshot struct {
	nodes    []metav1.PartialObjectMetadata
	ds       *appsv1.DaemonSet
	pods     map[string]*corev1.Pod // agent pods by node
	statuses map[string]*nodestatus.Status
}

// clients are the API clients of the kubeconfig the flags name.
type clients struct {
	core kubernetes.Interface
	md   metadata.Interface
	dyn  dynamic.Interface
}

func (o *options) clients() (*clients, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.rules, o.overrides).ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "kubectl-podwire"
	c := &clients{}
	if c.core, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.md, err = metadata.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// snapshot checks the flags and reads the cluster.
func (o *options) snapshot(ctx context.Context) (*snapshot, error) {
	if err := o.checkOutput(); err != nil {
		return nil, err
	}
	c, err := o.clients()
	if err != nil {
		return nil, err
	}
	return o.read(ctx, c)
}

// pageSize bounds each LIST's answer: a cluster of thousands of nodes is
// read a page at a time.
const pageSize = 500

// read reads the nodes (all, or o.node), podwire's DaemonSet and its pods,
// and the PodwireNodeStatuses.
func (o *options) read(ctx context.Context, c *clients) (*snapshot, error) {
	s := &snapshot{pods: map[string]*corev1.Pod{}, statuses: map[string]*nodestatus.Status{}}
	dss, err := c.core.AppsV1().DaemonSets(o.system).List(ctx, metav1.ListOptions{LabelSelector: agentLabel})
	if err != nil {
		return nil, fmt.Errorf("podwire's DaemonSet in namespace %s: %w", o.system, err)
	}
	if len(dss.Items) == 0 {
		return nil, fmt.Errorf("no DaemonSet labelled %s in namespace %s (--podwire-namespace)", agentLabel, o.system)
	}
	s.ds = &dss.Items[0]
	sel, err := metav1.LabelSelectorAsSelector(s.ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("DaemonSet %s/%s: %w", o.system, s.ds.Name, err)
	}
	podOpts := metav1.ListOptions{LabelSelector: sel.String()}
	if o.node != "" {
		podOpts.FieldSelector = "spec.nodeName=" + o.node
	}
	pods, err := c.core.CoreV1().Pods(o.system).List(ctx, podOpts)
	if err != nil {
		return nil, fmt.Errorf("podwire's agent pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil && s.pods[p.Spec.NodeName] != nil {
			continue // unscheduled, or going while another runs
		}
		if old := s.pods[p.Spec.NodeName]; old == nil || podReady(p) || !podReady(old) && p.CreationTimestamp.After(old.CreationTimestamp.Time) {
			s.pods[p.Spec.NodeName] = p
		}
	}

	if o.node != "" {
		n, err := c.md.Resource(nodesGVR).Get(ctx, o.node, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", o.node, err)
		}
		s.nodes = append(s.nodes, *n)
		u, err := c.dyn.Resource(nodeStatuses).Get(ctx, o.node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("PodwireNodeStatus %s: %w", o.node, err)
		default:
			if err := s.addStatus(u); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	err = pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return c.md.Resource(nodesGVR).List(ctx, opts)
	}).EachListItem(ctx, metav1.ListOptions{Limit: pageSize}, func(obj runtime.Object) error {
		s.nodes = append(s.nodes, *obj.(*metav1.PartialObjectMetadata))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	err = pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return c.dyn.Resource(nodeStatuses).List(ctx, opts)
	}).EachListItem(ctx, metav1.ListOptions{Limit: pageSize}, func(obj runtime.Object) error {
		return s.addStatus(obj.(*unstructured.Unstructured))
	})
	if err != nil {
		return nil, fmt.Errorf("PodwireNodeStatuses (is podwire's CRD installed?): %w", err)
	}
	return s, nil
}

// addStatus decodes one PodwireNodeStatus.
func (s *snapshot) addStatus(u *unstructured.Unstructured) error {
	raw, ok := u.Object["status"]
	if !ok {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	st := &nodestatus.Status{}
	if err := json.Unmarshal(b, st); err != nil {
		return fmt.Errorf("PodwireNodeStatus %s: %w", u.GetName(), err)
	}
	s.statuses[u.GetName()] = st
	return nil
}

// podReady is p's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// agentStarted is when p's agent container last started (zero: not
// running).
func agentStarted(p *corev1.Pod) time.Time {
	for _, cs := range p.Status.ContainerStatuses {
		if r := cs.State.Running; r != nil && cs.Name == "agent" {
			return r.StartedAt.Time
		}
	}
	return time.Time{}
}

// reportLag is how long an agent may run before its first report: it
// writes one once its informers have listed, within seconds.
const reportLag = 30 * time.Second

// views is each node's health, by name.
func (s *snapshot) views(now time.Time) ([]nodeView, error) {
	pod := &corev1.Pod{Spec: s.ds.Spec.Template.Spec}
	match := nodeaffinity.GetRequiredNodeAffinity(pod)
	var out []nodeView
	for i := range s.nodes {
		n := &s.nodes[i]
		selected, err := match.Match(&corev1.Node{ObjectMeta: n.ObjectMeta})
		if err != nil {
			return nil, fmt.Errorf("DaemonSet %s's node affinity on node %s: %w", s.ds.Name, n.Name, err)
		}
		v := nodeView{Node: n.Name, Selected: selected}
		p := s.pods[n.Name]
		st := s.statuses[n.Name]
		if st != nil {
			c := *st
			c.Pods = nil
			v.Status = &c
		}
		switch {
		case p == nil && selected:
			v.Problems = append(v.Problems, "no podwire agent pod on the node")
		case p != nil:
			v.AgentPod, v.AgentReady = p.Name, podReady(p)
			if !v.AgentReady {
				v.Problems = append(v.Problems, "agent pod "+p.Name+" not Ready"+readyMessage(p))
			}
		}
		switch {
		case st == nil && (selected || p != nil):
			v.Problems = append(v.Problems, "no PodwireNodeStatus: the agent has not reported")
		case st != nil && p != nil:
			if started := agentStarted(p); !started.IsZero() && st.Updated.Before(started) && now.Sub(started) > reportLag {
				v.Problems = append(v.Problems, fmt.Sprintf("the agent running since %s has not reported (last report %s)",
					started.UTC().Format(time.RFC3339), st.Updated.UTC().Format(time.RFC3339)))
			}
			for _, pr := range st.Problems() {
				if !v.AgentReady {
					pr = "as of " + st.Updated.UTC().Format(time.RFC3339) + ": " + pr
				}
				if !slices.Contains(v.Problems, pr) {
					v.Problems = append(v.Problems, pr)
				}
			}
		}
		v.Healthy = len(v.Problems) == 0
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b nodeView) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// readyMessage is the reason the kubelet gives for p's readiness, if any
// (the probe's answer: the agent's /readyz says why).
func readyMessage(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Message != "" {
			return ": " + c.Message
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return ": " + w.Reason
		}
	}
	return ""
}
