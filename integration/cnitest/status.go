package cnitest

import (
	"encoding/json"
	"fmt"
	"os/exec"
)

// Status is the part of `podwire status --json` (plugins/podwire
// cli_status.go) that the suites check.
type Status struct {
	Tables []struct {
		Name    string `json:"name"`
		Current bool   `json:"current"`
	} `json:"tables"`
	Attachments []struct {
		Pod         string `json:"pod"`
		Forwarding  bool   `json:"forwarding"`
		SourceCheck bool   `json:"sourceCheck"`
		Complete    bool   `json:"complete"`
	} `json:"attachments"`
	Warnings []string `json:"warnings"`
	// Agent is the node agent's state, nil when none answered.
	Agent *struct {
		Node     string `json:"node"`
		Ready    bool   `json:"ready"`
		Conflist string `json:"conflist"`
		Mode     string `json:"mode"`
	} `json:"agent"`
}

// RunStatus runs cmd (`podwire status ... --json`, in the node's
// namespaces) and parses what it prints; the error carries the output.
func RunStatus(cmd *exec.Cmd) (*Status, []byte, error) {
	out, err := cmd.Output()
	if err != nil {
		return nil, out, fmt.Errorf("podwire status: %w\n%s", err, out)
	}
	var st Status
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, out, fmt.Errorf("podwire status --json: %w\n%s", err, out)
	}
	return &st, out, nil
}

// NotCurrent names the tables the status lists as not current.
func (s *Status) NotCurrent() []string {
	var names []string
	for _, t := range s.Tables {
		if !t.Current {
			names = append(names, t.Name)
		}
	}
	return names
}
