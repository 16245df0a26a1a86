package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/pkg/agent"
)

// handoverHealth is the agents' health address inside the node netns (the
// node's own loopback): both agents of a surge ask for the same port, as
// the DaemonSet's two pods on a node do.
const handoverHealth = "127.0.0.1:9765"

// startHandoverAgent runs an agent with id and podwire's entry on u, its
// health on handoverHealth, until the returned stop (runAgent).
func (u *uninstallNode) startHandoverAgent(id string, entry map[string]any) (stop func()) {
	u.t.Helper()
	e, err := json.Marshal(entry)
	if err != nil {
		u.t.Fatal(err)
	}
	return u.runAgent(agent.Config{ID: id, Timing: agent.Timing{Interval: 500 * time.Millisecond}, Serve: agent.Serve{HealthAddr: handoverHealth}, Chain: agent.Chain{Entry: e}})
}

// entryLogFile is the logFile of podwire's entry in the node's conflist.
func (u *uninstallNode) entryLogFile() string {
	u.t.Helper()
	raw, ok := u.entry()
	if !ok {
		u.t.Fatalf("no podwire entry in %s", u.primary())
	}
	var e struct{ LogFile string }
	if err := json.Unmarshal(raw, &e); err != nil {
		u.t.Fatal(err)
	}
	return e.LogFile
}

// readyz GETs /readyz on the node's health address; it returns the body.
// The transport dials in goroutines of its own: each dial enters the node
// netns itself.
func (u *uninstallNode) readyz() (string, error) {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := u.NS.Do(func(ns.NetNS) error {
				var err error
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		}}}
	resp, err := c.Get("http://" + handoverHealth + "/readyz")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return string(b), fmt.Errorf("/readyz: %s: %s", resp.Status, b)
	}
	return string(b), nil
}

// TestSurgeHandover: two agents on one node, as a surge rollout of the
// DaemonSet (maxSurge 1, maxUnavailable 0) runs them for a few seconds,
// the new one with a changed entry (its logFile). The new one, started
// last, takes the node over: its entry is in the chain within a drift
// tick and stays there for the next ten ticks, every sample (the old
// agent, superseded, no longer puts its own back); the plugin's socket is
// the new agent's; the old agent answers /readyz (the kubelet's probe of
// the new pod, on the port the old one holds) with the new one's state. The health port, held by the old agent, is the new
// one's once the old has stopped; the stopping old agent changes nothing
// on the node (its entry does not come back, the socket path stays).
func TestSurgeHandover(t *testing.T) {
	u := newUninstallNode(t)
	oldLog, newLog := filepath.Join(u.Dir, "old.log"), filepath.Join(u.Dir, "new.log")
	stopOld := u.startHandoverAgent("pod-old", u.podwireEntry(map[string]any{"logFile": oldLog}))
	if got := u.entryLogFile(); got != oldLog {
		t.Fatalf("the old agent's entry: logFile %q, want %q", got, oldLog)
	}
	if err := eventually(5*time.Second, func() error { _, err := u.readyz(); return err }); err != nil {
		t.Fatalf("the old agent's /readyz: %v", err)
	}

	stopNew := u.startHandoverAgent("pod-new", u.podwireEntry(map[string]any{"logFile": newLog}))
	if err := eventually(5*time.Second, func() error {
		if got := u.entryLogFile(); got != newLog {
			return fmt.Errorf("logFile %q", got)
		}
		return nil
	}); err != nil {
		t.Fatalf("the new agent's entry never reached the chain: %v", err)
	}
	// Ten drift ticks of both agents, sampled every 100 ms.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := u.entryLogFile(); got != newLog {
			t.Fatalf("while both agents run, the chain went back to logFile %q: the old agent still writes the node", got)
		}
	}
	// The socket path is the new agent's: it answers a pod lookup.
	sock := filepath.Join(u.StateDir(), "agent.sock")
	if err := u.NS.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("nothing answers %s with both agents running: %v", sock, err)
	}

	// The kubelet's probe of the new pod reaches the old agent, which
	// still holds the port: it answers for the new one, Ready.
	if err := eventually(5*time.Second, func() error {
		body, err := u.readyz()
		if err == nil && !strings.Contains(body, "new agent") {
			err = fmt.Errorf("/readyz answered %q: the old agent's own state", body)
		}
		return err
	}); err != nil {
		t.Fatalf("with both agents running: %v", err)
	}

	stopOld()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the old agent's stop removed the socket its successor serves: %v", err)
	}
	if err := eventually(5*time.Second, func() error { _, err := u.readyz(); return err }); err != nil {
		t.Fatalf("the new agent never took the health port over after the old one stopped: %v", err)
	}
	if got := u.entryLogFile(); got != newLog {
		t.Fatalf("after the old agent's stop the chain has logFile %q, want the new agent's %q", got, newLog)
	}
	stopNew()
}
