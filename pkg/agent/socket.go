package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/podwire/podwire/pkg/agentapi"
)

// ensureStateDir creates stateDir, or takes it as it is, and makes it 0700
// whoever created it (the kubelet's hostPath DirectoryOrCreate makes it
// 0755): it holds the records, the node lock and the agent's socket. A
// path that is not a directory (a symlink included) is an error.
func ensureStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("failed to create state dir %q: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("failed to read state dir %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state dir %q is a %s, not a directory", dir, fi.Mode().Type())
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("failed to restrict state dir %q to 0700: %w", dir, err)
		}
	}
	return nil
}

// listen opens the socket the plugin asks (agentapi.Listen: root peers
// only, 0600, a capped number of connections, never unlinked on close).
func (a *Agent) listen() (net.Listener, error) {
	return agentapi.Listen(a.cfg.Serve.Socket, agentapi.MaxConns, a.log)
}

// observedHandle is handle, counted and timed for /metrics.
func (a *Agent) observedHandle(ctx context.Context, req agentapi.Request) *agentapi.Response {
	start := time.Now()
	resp := a.handle(ctx, req)
	a.m.observe(req.Op, resp, time.Since(start))
	return resp
}

// handle answers one request of the plugin.
func (a *Agent) handle(ctx context.Context, req agentapi.Request) *agentapi.Response {
	switch req.Op {
	case agentapi.OpPod:
		resp, refusal := a.api.pods.lookup(ctx, req.Namespace, req.Name, req.UID)
		if refusal != "" {
			a.m.refused(refusal)
		}
		a.log.Info("pod annotations asked", "pod", req.Namespace+"/"+req.Name, "uid", req.UID,
			"source", resp.Source, "code", resp.Code, "error", resp.Error)
		return resp
	case agentapi.OpNamespace:
		resp := a.api.ns.Labels(ctx, req.Namespace)
		a.log.Info("namespace labels asked", "namespace", req.Namespace, "source", resp.Source, "code", resp.Code, "error", resp.Error)
		return resp
	case agentapi.OpRefusal:
		gate := a.m.refused(req.Reason)
		msg := req.Message
		if len(msg) > agentapi.MaxRefusalMessage {
			msg = msg[:agentapi.MaxRefusalMessage] + "..."
		}
		a.log.Info("the plugin refused a pod", "pod", req.Namespace+"/"+req.Name, "uid", req.UID, "reason", gate, "message", msg)
		a.ev.refused(req.Namespace, req.Name, req.UID, gate, msg)
		a.noteRefusal(req.Namespace, req.Name, gate, msg)
		return &agentapi.Response{}
	case agentapi.OpClaim, agentapi.OpRelease:
		return a.handleClaims(ctx, req)
	case agentapi.OpStatus:
		st := a.Status()
		return &agentapi.Response{Status: &st}
	default:
		// A plugin newer than this agent (an upgrade under way): CNI
		// error 11, try again later, as for a protocol it cannot read.
		return &agentapi.Response{Code: 11, Error: fmt.Sprintf("unknown op %q: the agent (%s) is older than the plugin", req.Op, a.cfg.Version)}
	}
}
