package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/pkg/atomicfile"
)

// OwnerName is the file in stateDir naming the agent that owns the node:
// the one that last started. A surge rollout of the DaemonSet (maxSurge 1,
// maxUnavailable 0) runs the old and the new agent on a node together for
// a few seconds; without an owner both would keep the chain, the binary
// and the tables, each undoing the other's version. The new agent claims
// the node before it touches anything; the old one, finding another owner
// at its next step, stops changing the node (it is superseded) and only
// waits for its stop. Its socket, already unlinked by the new agent's
// bind, gets no new connection.
const OwnerName = "agent.owner"

// owner is the content of OwnerName.
type owner struct {
	// ID is the owning agent's pod UID (the DaemonSet sets POD_UID from
	// metadata.uid), or a process-unique ID outside a pod.
	ID      string    `json:"id"`
	Version string    `json:"version"`
	Since   time.Time `json:"since"`
	// Ready: the owner has been Ready once (its /readyz). The agent it
	// replaced, still holding the health port during a surge, answers the
	// kubelet's probes of the new pod with it.
	Ready bool `json:"ready,omitempty"`
}

// claim makes this agent the node's owner.
func (a *Agent) claim() error {
	a.st.mu.Lock()
	if a.st.claimed.IsZero() {
		a.st.claimed = time.Now().UTC()
	}
	o := owner{ID: a.cfg.ID, Version: a.cfg.Version, Since: a.st.claimed, Ready: a.st.ownerReady}
	a.st.mu.Unlock()
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(a.cfg.StateDir, OwnerName), b, 0o600)
}

// markReady records in the owner file, once, that this agent is Ready.
func (a *Agent) markReady() {
	a.st.mu.Lock()
	ready := !a.st.ownerReady && a.readyLocked() == nil
	if ready {
		a.st.ownerReady = true
	}
	a.st.mu.Unlock()
	if ready {
		a.setFinding("owner file", a.claim())
	}
}

// successorReady is nil when the owner file says the owner is Ready.
func (a *Agent) successorReady() error {
	b, err := os.ReadFile(filepath.Join(a.cfg.StateDir, OwnerName))
	if err != nil {
		return fmt.Errorf("superseded; the new agent's state: %w", err)
	}
	var o owner
	if err := json.Unmarshal(b, &o); err != nil {
		return fmt.Errorf("superseded; the new agent's state: %w", err)
	}
	if !o.Ready {
		return fmt.Errorf("superseded by %s, not Ready yet", o.ID)
	}
	return nil
}

// supersededBy returns the owner that took the node over from this agent
// (nil while this agent owns it). A missing or unreadable owner file is
// not a takeover: this agent then claims the node again, so that a file
// removed by hand or by an uninstall's cleanup never leaves a node
// without an agent that keeps it.
func (a *Agent) supersededBy() *owner {
	b, err := os.ReadFile(filepath.Join(a.cfg.StateDir, OwnerName))
	var o owner
	if err == nil {
		err = json.Unmarshal(b, &o)
	}
	if err != nil || o.ID == "" {
		if !errors.Is(err, fs.ErrNotExist) && err != nil {
			a.log.Warn("unreadable owner file: claiming the node again", "file", OwnerName, "error", err)
		}
		a.setFinding("owner file", a.claim())
		return nil
	}
	if o.ID == a.cfg.ID {
		return nil
	}
	return &o
}

// superseded reports whether another agent owns the node now; the first
// time it does, it says so in the log.
func (a *Agent) superseded() bool {
	a.st.mu.Lock()
	done := a.st.successor != ""
	a.st.mu.Unlock()
	if done {
		return true
	}
	o := a.supersededBy()
	if o == nil {
		return false
	}
	a.st.mu.Lock()
	a.st.successor = fmt.Sprintf("%s (version %s, since %s)", o.ID, o.Version, o.Since.Format(time.RFC3339))
	a.st.mu.Unlock()
	a.log.Info("another agent took the node over: this one changes nothing more and waits for its stop",
		"successor", o.ID, "successorVersion", o.Version)
	return true
}

// serveWhenFree serves srv on the TCP address addr (what names it in the
// log). During a surge rollout the agent being replaced still holds the
// node's port (host network): then the bind is retried every 500 ms until
// that agent has stopped, in the background; meanwhile the kubelet's
// probes and a scrape reach the old agent, whose answer stays true of the
// node (it keeps the node's state as it was until the new owner writes).
// Any other failure to listen (a bad address) is returned at once.
func serveWhenFree(ctx context.Context, addr, what string, srv *http.Server, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("failed to listen on %s (%s): %w", addr, what, err)
	}
	var here ns.NetNS
	if ln == nil {
		// The retries run on other threads: each binds in the netns this
		// call was made in (the node's; in the tests a netns of their own).
		if here, err = ns.GetCurrentNS(); err != nil {
			return fmt.Errorf("failed to listen on %s (%s): %w", addr, what, err)
		}
	}
	go func() { <-ctx.Done(); srv.Close() }()
	go func() {
		if ln == nil {
			defer here.Close()
			log.Info("port in use, probably by the agent this one replaces: retrying until it is free", "addr", addr, "serves", what)
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for ln == nil {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				err := here.Do(func(ns.NetNS) error {
					var err error
					ln, err = net.Listen("tcp", addr)
					return err
				})
				if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
					log.Error("failed to listen", "addr", addr, "serves", what, "error", err)
					return
				}
			}
			log.Info("listening", "addr", addr, "serves", what)
		}
		_ = srv.Serve(ln)
	}()
	return nil
}
