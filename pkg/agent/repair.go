package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/podwire/podwire/pkg/cliapi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// repairTables is the one place the agent verifies and repairs podwire's
// node tables. It runs the installed plugin's `podwire repair`, which is
// ADD's own verify and apply (nft.Ensure with every step's tables and every
// record's elements, under the node lock): the repair is exactly what the
// next ADD would do, by the binary the runtime runs. args are repair's
// further flags (the unknown interfaces, unknown.go).
func repairTables(ctx context.Context, plugin, conflist string, args ...string) (*cliapi.RepairResult, error) {
	cmd := exec.CommandContext(ctx, plugin, append([]string{"repair", "--conflist", conflist}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s repair: %v: %s", plugin, err, strings.TrimSpace(stderr.String()))
	}
	var res cliapi.RepairResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("%s repair: bad output %q: %w", plugin, out, err)
	}
	return &res, nil
}

// Event reasons the agent records on its Node.
const (
	ReasonTablesRepaired = "PodwireTablesRepaired"
	ReasonChainRestored  = "PodwireChainRestored"
	// ReasonEgressError: an egress IP refused by egress.allowedCIDRs, or
	// not assigned on the node (a Warning Event).
	ReasonEgressError = "PodwireEgressError"
)

// noteEgressErrors makes the node tables' errors of a repair the agent's
// error "egress" (in its status, `podwire status` and /readyz's text, not
// its readiness: the source check still holds) and records each new set of
// them as a Warning Event on the Node.
func (a *Agent) noteEgressErrors(ctx context.Context, errs []string) {
	msg := strings.Join(errs, "; ")
	a.mu.Lock()
	old := a.errs["egress"]
	a.mu.Unlock()
	if msg == "" {
		a.setErr("egress", nil)
		return
	}
	a.setErr("egress", errors.New(msg))
	if msg == old {
		return
	}
	if err := recordEventType(ctx, a.events, a.cfg.Node, a.node.UID(), ReasonEgressError, msg, corev1.EventTypeWarning, time.Now()); err != nil {
		a.log.Warn("failed to record the Event", "error", err)
	}
}

// eventNamespace holds Node events, as the kubelet's.
const eventNamespace = metav1.NamespaceDefault

// recordEvent creates one Normal Event on the node (RBAC: create events,
// nothing more; so no aggregation, which would PATCH).
func recordEvent(ctx context.Context, events corev1client.EventsGetter, node, nodeUID, reason, msg string, now time.Time) error {
	return recordEventType(ctx, events, node, nodeUID, reason, msg, corev1.EventTypeNormal, now)
}

// recordEventType is recordEvent with the Event's type (Normal, Warning).
func recordEventType(ctx context.Context, events corev1client.EventsGetter, node, nodeUID, reason, msg, typ string, now time.Time) error {
	if events == nil {
		return nil
	}
	if nodeUID == "" {
		nodeUID = node // the kubelet's own convention for Node events
	}
	t := metav1.NewTime(now)
	_, err := events.Events(eventNamespace).Create(ctx, &corev1.Event{
		// Named as the kubelet names its events: object name, unique suffix.
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", node, now.UnixNano()), Namespace: eventNamespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Node", Name: node, UID: ktypes.UID(nodeUID),
		},
		Reason: reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: "podwire-agent", Host: node},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
		ReportingController: "podwire.io/agent", ReportingInstance: node,
	}, metav1.CreateOptions{})
	return err
}
