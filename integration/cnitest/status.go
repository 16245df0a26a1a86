package cnitest

import (
	"encoding/json"
	"fmt"
	"os/exec"

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
