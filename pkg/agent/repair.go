package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/podwire/podwire/pkg/cliapi"
	corev1 "k8s.io/api/core/v1"
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
	a.ev.onNode(a.node.UID(), corev1.EventTypeWarning, ReasonEgressError, msg)
}
