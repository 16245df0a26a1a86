package cnitest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/podwire/podwire/pkg/cliapi"
)

// RunStatus runs cmd (`podwire status ... --json`, in the node's
// namespaces) and parses what it prints; the error carries the output.
func RunStatus(cmd *exec.Cmd) (*cliapi.NodeStatus, []byte, error) {
	out, err := cmd.Output()
	if err != nil {
		return nil, out, fmt.Errorf("podwire status: %w\n%s", err, out)
	}
	var st cliapi.NodeStatus
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, out, fmt.Errorf("podwire status --json: %w\n%s", err, out)
	}
	return &st, out, nil
}

// SettledStatus runs `podwire status --json` (command makes a fresh one
// each time, e.g. in a node's namespaces) until it shows the agent Ready,
// every node table current and no unknown interface, for up to d: a
// rollout ends when the agent's pod is Ready, and its own view may lag its
// /readyz by a pass. It returns the last status, its output and, past d,
// what was still unsettled.
func SettledStatus(d time.Duration, command func() *exec.Cmd) (*NodeStatusResult, error) {
	var r NodeStatusResult
	err := Eventually(d, func() error {
		var err error
		r.Status, r.Output, err = RunStatus(command())
		switch {
		case err != nil:
			return err
		case len(r.Status.NotCurrent()) > 0:
			return fmt.Errorf("tables not current %v", r.Status.NotCurrent())
		case r.Status.Agent == nil || !r.Status.Agent.Ready:
			return errors.New("the agent is not ready")
		case len(r.Status.Agent.Unknown) > 0:
			return fmt.Errorf("the agent reports unknown interfaces %v", r.Status.Agent.Unknown)
		}
		return nil
	})
	return &r, err
}

// NodeStatusResult is SettledStatus' last reading: the parsed status (nil
// when it could not be read) and what the command printed.
type NodeStatusResult struct {
	Status *cliapi.NodeStatus
	Output []byte
}
