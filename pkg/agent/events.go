package agent

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// ReasonRefused is the reason of the Event on a pod whose ADD the plugin
// refused (agentapi.OpRefusal); its message names the gate.
const ReasonRefused = "PodwireRefused"

// eventInterval is the least time between two Events of one cause (one
// object, reason and message): a repair that another owner's loop makes
// every few seconds, or a tenant's pod refused again at each of the
// kubelet's retries, makes one Event a minute at most.
const eventInterval = 60

// events records the agent's Events, on its Node and on pods, through one
// client-go event recorder. The recorder's correlator aggregates similar
// Events (ten of one reason with differing messages become one Event with
// a count, patched) and its spam filter, keyed here by cause rather than
// by object alone, lets one Event per cause through per eventInterval and
// drops the rest: an owner that flushes the ruleset in a loop, or a tenant
// that creates refused pods in one, cannot make the agent flood the API
// server. Recording is asynchronous and never blocks a reconciler or the
// socket's answer; the repairs themselves are counted in /metrics and the
// agent's status, not by Events.
//
// RBAC (the chart's ClusterRole): create and patch events; a repeat that
// the correlator aggregates is a PATCH of the first Event.
type events struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	node        string
}

// passiveClock is what the correlator reads time from (k8s.io/utils'
// clock.PassiveClock, which a test fakes).
type passiveClock interface {
	Now() time.Time
	Since(time.Time) time.Duration
}

// newEvents starts a recorder writing to sink (nil: none, every method a
// no-op) as the agent of node; clk times the correlator (nil: the real
// clock).
func newEvents(sink corev1client.EventsGetter, node string, clk passiveClock) *events {
	if sink == nil {
		return &events{node: node}
	}
	opts := record.CorrelatorOptions{SpamKeyFunc: causeKey, BurstSize: 1, QPS: 1.0 / eventInterval}
	if clk != nil {
		opts.Clock = clk
	}
	b := record.NewBroadcaster(record.WithCorrelatorOptions(opts))
	b.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: sink.Events("")})
	return &events{broadcaster: b, node: node, recorder: b.NewRecorder(scheme.Scheme,
		corev1.EventSource{Component: "podwire-agent", Host: node})}
}

// causeKey is the spam filter's key: the source, the object, the type, the
// reason and the message (client-go's default leaves the reason and the
// message out, so one object's causes would share one budget).
func causeKey(e *corev1.Event) string {
	o := e.InvolvedObject
	return strings.Join([]string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, string(o.UID), o.APIVersion, e.Type, e.Reason, e.Message}, "\x00")
}

// onNode records an Event of type typ (Normal, Warning) and reason on the
// agent's Node, whose UID is nodeUID ("" before the informer has it: the
// node's name, the kubelet's own convention for Node Events). Node Events
// go to the default namespace, as the kubelet's.
func (e *events) onNode(nodeUID, typ, reason, msg string) {
	if e == nil || e.recorder == nil {
		return
	}
	if nodeUID == "" {
		nodeUID = e.node
	}
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: e.node, UID: ktypes.UID(nodeUID)}
	e.recorder.Event(ref, typ, reason, msg)
}

// refused records the refusal of pod namespace/name (uid) by gate, with
// the plugin's error message msg.
func (e *events) refused(namespace, name, uid, gate, msg string) {
	e.onPod(namespace, name, uid, corev1.EventTypeWarning, ReasonRefused, fmt.Sprintf("podwire refused the pod's network (gate %s): %s", gate, msg))
}

// onPod records an Event of type typ and reason on pod namespace/name.
func (e *events) onPod(namespace, name, uid, typ, reason, msg string) {
	if e == nil || e.recorder == nil || namespace == "" || name == "" {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: name, UID: ktypes.UID(uid)}
	e.recorder.Event(ref, typ, reason, msg)
}

// stop flushes what can be flushed and stops the recorder.
func (e *events) stop() {
	if e != nil && e.broadcaster != nil {
		e.broadcaster.Shutdown()
	}
}
