package agent

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// ReasonRefused is the reason of the Event on a pod whose ADD the plugin
// refused (agentapi.OpRefusal); its message names the gate.
const ReasonRefused = "PodwireRefused"

// podEvents records the plugin's refusals as Events on the refused pods,
// through client-go's event recorder: repeats of one pod's Event (the
// kubelet retries a failed sandbox) are aggregated into one with a count,
// and each pod's Events are rate-limited (the recorder's spam filter: a
// burst of 25, then one per 5 minutes), so a tenant that creates refused
// pods in a loop cannot make the agent flood the API server. Recording is
// asynchronous and never blocks the socket's answer.
//
// RBAC: create events; a repeat is a PATCH of the first Event (patch
// events), which an agent without that verb loses (client-go logs it).
type podEvents struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

// newPodEvents starts a recorder writing to events (nil: none, every
// method a no-op) as the agent of node.
func newPodEvents(events corev1client.EventsGetter, node string) *podEvents {
	if events == nil {
		return &podEvents{}
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: events.Events("")})
	return &podEvents{broadcaster: b, recorder: b.NewRecorder(scheme.Scheme,
		corev1.EventSource{Component: "podwire-agent", Host: node})}
}

// refused records the refusal of pod namespace/name (uid) by gate, with
// the plugin's error message msg.
func (p *podEvents) refused(namespace, name, uid, gate, msg string) {
	if p == nil || p.recorder == nil || namespace == "" || name == "" {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: name, UID: ktypes.UID(uid)}
	p.recorder.Event(ref, corev1.EventTypeWarning, ReasonRefused, fmt.Sprintf("podwire refused the pod's network (gate %s): %s", gate, msg))
}

// stop flushes what can be flushed and stops the recorder.
func (p *podEvents) stop() {
	if p != nil && p.broadcaster != nil {
		p.broadcaster.Shutdown()
	}
}
