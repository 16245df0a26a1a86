package main

import (
	"strings"
	"testing"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/cliapi"
)

// TestStatusPrintsRevoked: `podwire status` names the attachments the
// agent found no longer admitted by the gates.
func TestStatusPrintsRevoked(t *testing.T) {
	line := "nf-a/router (c0/eth0): annotation podwire.io/forwarding \"true\" refused by forwarding.namespaces and forwarding.namespaceSelector"
	st := &nodeStatus{cliapi.NodeStatus{StateDir: "/run/podwire", Agent: &agentapi.Status{Node: "n1", Revoked: []string{line}}}}
	var b strings.Builder
	st.print(&b)
	if !strings.Contains(b.String(), "REVOKED gate, still wired: "+line) {
		t.Errorf("podwire status printed:\n%s\nwant the revoked attachment named", b.String())
	}
}
