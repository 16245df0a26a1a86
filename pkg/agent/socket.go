package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/podwire/podwire/pkg/agentapi"
)

// listen opens the socket the plugin asks, root only (0600).
func (a *Agent) listen() (net.Listener, error) {
	if err := os.Remove(a.cfg.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("failed to remove stale socket %q: %w", a.cfg.Socket, err)
	}
	ln, err := net.Listen("unix", a.cfg.Socket)
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %q: %w", a.cfg.Socket, err)
	}
	if err := os.Chmod(a.cfg.Socket, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("failed to restrict %q: %w", a.cfg.Socket, err)
	}
	return ln, nil
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
		resp, refusal := a.pods.lookup(ctx, req.Namespace, req.Name, req.UID)
		if refusal != "" {
			a.m.refused(refusal)
		}
		a.log.Info("pod annotations asked", "pod", req.Namespace+"/"+req.Name, "uid", req.UID,
			"source", resp.Source, "code", resp.Code, "error", resp.Error)
		return resp
	case agentapi.OpRefusal:
		a.m.refused(req.Reason)
		a.log.Info("the plugin refused a pod", "pod", req.Namespace+"/"+req.Name, "uid", req.UID, "reason", req.Reason)
		return &agentapi.Response{}
	case agentapi.OpStatus:
		st := a.Status()
		return &agentapi.Response{Status: &st}
	default:
		// A plugin newer than this agent (an upgrade under way): CNI
		// error 11, try again later, as for a protocol it cannot read.
		return &agentapi.Response{Code: 11, Error: fmt.Sprintf("unknown op %q: the agent (%s) is older than the plugin", req.Op, a.cfg.Version)}
	}
}
