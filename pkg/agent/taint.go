package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The startup taint: the scheduler keeps pods off a node that carries it
// until podwire is in the chain the runtime reads there, so that no pod
// starts unchecked (the source check's rule passes interfaces podwire never
// wired). Nodes are registered with it as NoExecute (the kubelet's
// --register-with-taints=KEY=:NoExecute, kubeadm's
// nodeRegistration.taints), as Cilium recommends for its
// node.cilium.io/agent-not-ready: the kubelet admits against NoExecute
// taints only, so with NoSchedule a pod bound to the node by name would
// start before podwire is in the chain. The DaemonSets a node needs before
// podwire (its primary, kube-proxy, podwire's own) tolerate it or every
// taint. The agent removes it, whatever its effect, once Ready, and puts it
// back with Config.Taint.Effect while podwire is out of that chain
// (the chain's sync fails, or the runtime reads another file: InUse).

// DefaultStartupTaint is the startup taint's key.
const DefaultStartupTaint = "podwire.io/agent-not-ready"

// taintState is what the agent last made of its Node's startup taint.
type taintState int

const (
	taintUnknown taintState = iota
	taintOn
	taintOff
)

// taintMemo is what the agent last made of the taint, on which version
// of its Node (metadata.resourceVersion, "" when unknown): any change of
// the Node since (a re-registration, which makes a new object with the
// taint, or the taint put back by hand) makes the agent look again.
type taintMemo struct {
	state taintState
	rv    string
}

// reconcileTaint removes the startup taint when the agent is Ready, and puts
// it back while podwire is out of the runtime's chain. The Node is read
// again only when its resourceVersion moved since the last decision (the
// Node informer's), so an idle node costs no request.
//
// Triggers: the agent's readiness changed (after any pass), the Node
// changed (the informer); Timing.RepairInterval as a backstop.
func (a *Agent) reconcileTaint(ctx context.Context) error {
	a.st.mu.Lock()
	ready := a.readyLocked() == nil
	outOfChain := a.st.outOfChain != ""
	memo := a.memo.taint
	a.st.mu.Unlock()
	rv := ""
	if m := a.api.node.meta(); m != nil {
		rv = m.ResourceVersion
	}
	var want taintState
	switch {
	case ready:
		want = taintOff
	case outOfChain:
		want = taintOn
	default:
		return nil
	}
	if memo.state == want && (rv == "" || rv == memo.rv) {
		return nil
	}
	changed, newRV, err := a.setTaint(ctx, want == taintOn)
	if err != nil {
		return err
	}
	a.memo.taint = taintMemo{state: want, rv: newRV}
	if changed {
		if want == taintOn {
			a.log.Warn("startup taint put back: podwire is out of the runtime's chain", "taint", a.cfg.Taint.Key)
		} else {
			a.log.Info("startup taint removed: podwire is in the runtime's chain", "taint", a.cfg.Taint.Key, "nodeUID", a.api.node.UID())
		}
	}
	return nil
}

// setTaint makes the Node carry the startup taint (of any effect; added
// with Config.Taint.Effect) or not, by a JSON patch of spec.taints
// that tests the resourceVersion it read, so a concurrent change of the
// taints (the node lifecycle controller's) fails it rather than being
// lost; the runner retries the pass. rv is the Node's resourceVersion after
// it.
func (a *Agent) setTaint(ctx context.Context, on bool) (changed bool, rv string, err error) {
	node, err := a.cfg.Taint.Nodes.Nodes().Get(ctx, a.cfg.Node, metav1.GetOptions{})
	if err != nil {
		return false, "", fmt.Errorf("failed to read Node %s for its startup taint: %w", a.cfg.Node, err)
	}
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == a.cfg.Taint.Key })
	has := len(taints) != len(node.Spec.Taints)
	if has == on {
		return false, node.ResourceVersion, nil
	}
	if on {
		effect := a.cfg.Taint.Effect
		if effect == "" {
			effect = corev1.TaintEffectNoSchedule
		}
		taints = append(taints, corev1.Taint{Key: a.cfg.Taint.Key, Effect: effect})
	}
	if taints == nil {
		taints = []corev1.Taint{}
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": node.ResourceVersion},
		{"op": "add", "path": "/spec/taints", "value": taints},
	})
	patched, err := a.cfg.Taint.Nodes.Nodes().Patch(ctx, a.cfg.Node, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return false, "", fmt.Errorf("failed to patch the startup taint %s of Node %s: %w", a.cfg.Taint.Key, a.cfg.Node, err)
	}
	return true, patched.ResourceVersion, nil
}
