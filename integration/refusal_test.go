package integration

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/state"
)

// TestRefusalReportBounded: the plugin reports a refusal to the node
// agent, but an agent that never answers (a socket whose listener accepts
// nothing: connect succeeds, no answer comes) or one too old to know the
// op costs the refused ADD at most the report's timeout (250 ms), never
// Call's wait for a restarting agent (15 s); the ADD fails with its own
// CNI error 7 naming the annotation either way, and leaves no record.
func TestRefusalReportBounded(t *testing.T) {
	n := newNode(t)
	if err := os.MkdirAll(n.StateDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(n.StateDir(), "agent.sock")
	old := func(context.Context, agentapi.Request) *agentapi.Response {
		return &agentapi.Response{Code: 11, Error: `unknown op "refusal": the agent is older than the plugin`}
	}
	for _, agent := range []struct {
		name  string
		serve func(net.Listener) (stop func())
	}{
		{"mute", func(ln net.Listener) func() { return func() {} }},
		{"old", func(ln net.Listener) func() {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = agentapi.Serve(ctx, ln, 5*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)), old)
			}()
			return func() { cancel(); <-done }
		}},
	} {
		t.Run(agent.name, func(t *testing.T) {
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			defer agent.serve(ln)()
			start := time.Now()
			_, err = n.addPod(podSpec{namespace: "shop", name: "pushy-" + agent.name,
				annotations: map[string]string{"podwire.io/forwarding": "true"}})
			took := time.Since(start)
			if err == nil {
				t.Fatal("a forwarding pod in a namespace forwarding.namespaces does not match was admitted")
			}
			if code := cniCode(err); code != 7 || !strings.Contains(err.Error(), "podwire.io/forwarding") {
				t.Errorf("ADD: code %d %v, want 7 naming podwire.io/forwarding", code, err)
			}
			if took > 3*time.Second {
				t.Errorf("the refused ADD took %v with a %s agent, want about the 250 ms report bound", took, agent.name)
			}
			if recs, err := state.New(n.StateDir()).List(); err != nil || len(recs) != 0 {
				t.Errorf("records left: %d %v", len(recs), err)
			}
		})
	}
}
