// Package agent is podwire's node agent (cmd/podwire-agent), run by the
// DaemonSet of deploy/ on every node. It is the only part of podwire that
// talks to the Kubernetes API (client-go, metadata-only informers). It:
//
//   - installs the plugin binary and keeps podwire's entry in the node's CNI
//     chain (Chain), restoring it within seconds of a primary's rewrite;
//   - serves pod annotations to the plugin over a unix socket in stateDir
//     (Pods, pkg/agentapi), for runtimes that do not send the capability;
//   - writes the node's egress annotation into stateDir (Node), and the
//     cluster's pod CIDRs and node IPs, which the egress table excepts
//     (ClusterNodes);
//   - publishes the prefixes its node's forwarding pods serve on its Node,
//     and routes the other nodes' (routes.go);
//   - repairs drift of podwire's nftables tables and VLAN wiring when the
//     kernel's notifications show another owner's change (and by a slow
//     poll as a backstop), and records each repair in its log and as an
//     Event on the Node;
//   - removes stale attachments, whose pod is gone while the runtime never
//     ran their DEL, by the plugin's DEL (collect.go);
//   - reports its health on a localhost HTTP port (/healthz, /readyz), and
//     serves Prometheus metrics on another (/metrics, metrics.go).
//
// Limits: stopping the agent changes nothing on the node, unless
// Config.Uninstall is set and the stop is an uninstall (uninstall.go): then
// podwire's entry leaves the chain at once, and the rest (tables, bridge,
// stateDir, binary) with the last DEL. The plugin's DEL works from the
// records in stateDir and never asks the agent, so pods wired before keep
// being deletable after the DaemonSet is gone.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/atomicfile"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/sourcecheck"
)

// Config is what the agent works on.
type Config struct {
	Node     string
	StateDir string
	// ID names this agent in stateDir's owner file (handover.go): the
	// pod's UID (the DaemonSet's POD_UID), unique per agent process.
	ID string
	// Socket is the unix socket the plugin asks (default StateDir/agent.sock).
	Socket string
	Chain  Chain
	// Interval is the period of the drift check of the chain, the egress
	// file and the cluster's CIDRs (default 3 s; repairs are due within
	// 10 s).
	Interval time.Duration
	// RepairInterval is the period of the tables' backstop repair (default
	// 60 s): drift is seen from nftables' and the links' notifications and
	// repaired within tableSettle; the poll catches what a lost
	// notification would hide.
	RepairInterval time.Duration
	// HealthAddr serves /healthz and /readyz ("" = none), e.g. 127.0.0.1:9765.
	HealthAddr string
	// MetricsAddr serves /metrics ("" = none), e.g. :9178.
	MetricsAddr string
	Version     string
	// Cluster follows every Node for the egress table's exceptions (nil:
	// none are written; the agent is Ready without them).
	Cluster *ClusterNodes
	// StartupTaint is the key of the node's startup taint (taint.go;
	// DefaultStartupTaint), which the agent removes once Ready and puts
	// back while podwire is out of the runtime's chain; "" or a nil Nodes:
	// the agent leaves taints alone.
	StartupTaint string
	// StartupTaintEffect is the effect the agent puts the startup taint
	// back with (empty: NoSchedule). It removes the taint whatever its
	// effect: nodes are registered with NoExecute.
	StartupTaintEffect corev1.TaintEffect
	Nodes              corev1client.NodesGetter
	// UnknownInterfaces is what the agent does about pod interfaces without
	// a podwire record: UnknownReport, UnknownDrop, or "" (nothing).
	UnknownInterfaces string
	// CollectGrace is how long a record's pod must have been absent from
	// the node, and how old the record must be, before the record is
	// collected (collect.go; default 60 s).
	CollectGrace time.Duration
	// Claims holds the node's pods' claims across the cluster (claims.go);
	// nil: the agent answers every claim with CNI error 11.
	Claims *Claims
	// Uninstall, when set (the chart's cni.uninstall), takes podwire out of
	// the node when the agent's stop is an uninstall (uninstall.go); nil:
	// stopping changes nothing on the node.
	Uninstall *Uninstall
}

// Agent runs the agent's loops; build it with New.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	md     metadata.Interface
	pods   *Pods
	ns     *Namespaces
	node   *Node
	events corev1client.EventsGetter
	m      *metrics
	// ev records the agent's Events on its Node and on pods (events.go),
	// from Run's start.
	ev *events

	mu     sync.Mutex
	status agentapi.Status
	ticked time.Time
	errs   map[string]string
	// tablesVerified: a table repair (verify, rebuild what differs) has
	// succeeded since the start.
	tablesVerified bool
	// clusterWritten: the cluster's CIDRs have been written once.
	clusterWritten bool
	// successor is the agent that took the node over ("" while this one
	// owns it): then this one changes nothing more (handover.go).
	successor string
	// claimed is when this agent claimed the node; ownerReady: its owner
	// file says it is Ready.
	claimed    time.Time
	ownerReady bool
	// taint is what the agent last made of the startup taint.
	taint taintMemo
	// routes is syncRoutes' memory (the drift loop's goroutine only).
	routes routeSync
	// revoked is noteRevoked's memory (the drift loop's goroutine only).
	revoked revokedSync
	// unknown and reported are noteUnknown's memory (the drift loop's
	// goroutine only): when each interface was first seen, and those
	// already reported.
	unknown  unknownSeen
	reported map[string]bool
	// vlanLinks are the links of the VLAN wiring the last repair named
	// (vlan.go), under mu.
	vlanLinks map[string]bool
	// collector removes stale attachments (collect.go; the drift loop's
	// goroutine only).
	collector *staleCollector
	// own tells this agent's commits from other owners' (nftwatch.go; the
	// drift loop's goroutine only).
	own *ownGens
	// env is envKey before the last repair (nodeenv.go; the drift loop's
	// goroutine only).
	env string
}

// New builds an agent from API clients (in-cluster in cmd/podwire-agent,
// fakes in tests). events may be nil (no Events recorded).
func New(cfg Config, md metadata.Interface, events corev1client.EventsGetter, log *slog.Logger) *Agent {
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(cfg.StateDir, config.AgentSocketName)
	}
	if cfg.Interval == 0 {
		cfg.Interval = 3 * time.Second
	}
	if cfg.RepairInterval == 0 {
		cfg.RepairInterval = 60 * time.Second
	}
	if cfg.CollectGrace == 0 {
		cfg.CollectGrace = collectGrace
	}
	if cfg.ID == "" {
		// Outside a pod: unique to this process.
		cfg.ID = fmt.Sprintf("pid-%d-%x", os.Getpid(), time.Now().UnixNano())
	}
	return &Agent{
		cfg: cfg, log: log, md: md, events: events, m: newMetrics(cfg.Version),
		pods:   NewPods(md, cfg.Node, 10*time.Minute),
		ns:     NewNamespaces(md, 10*time.Minute),
		node:   NewNode(md, cfg.Node, cfg.StateDir, 10*time.Minute),
		status: agentapi.Status{Node: cfg.Node, Version: cfg.Version, Started: time.Now().UTC()},
		errs:   map[string]string{},
		own:    newOwnGens(),
	}
}

// Run runs the agent until ctx ends: the socket and the informers first,
// then the chain (the binary and the entry), the tables, the conf dir
// watch, the drift loop and the health server.
func (a *Agent) Run(ctx context.Context) error {
	if err := ensureStateDir(a.cfg.StateDir); err != nil {
		return err
	}
	a.ev = newEvents(a.events, a.cfg.Node, nil)
	defer a.ev.stop()
	// Before anything is installed: a last DEL after an uninstall must not
	// remove the binary this agent is about to install.
	if err := a.clearUninstalled(); err != nil {
		return err
	}
	// The node is this agent's from now on: an agent it replaces (a surge
	// rollout runs both for a few seconds) stops changing the node at its
	// next step.
	if err := a.claim(); err != nil {
		return err
	}
	// The socket first: during a rolling upgrade the plugin's ADDs wait
	// for it (bounded), and every second before it answers lengthens them.
	ln, err := a.listen()
	if err != nil {
		return err
	}
	go func() {
		if err := agentapi.Serve(ctx, ln, 10*time.Second, a.log, a.observedHandle); err != nil {
			a.log.Error("socket server stopped", "error", err)
		}
	}()
	go a.pods.Run(ctx)
	go a.ns.Run(ctx)
	go a.node.Run(ctx)
	if a.cfg.Cluster != nil {
		go a.cfg.Cluster.Run(ctx)
	}
	if a.cfg.Uninstall != nil {
		go a.cfg.Uninstall.Run(ctx)
	}
	if a.cfg.Claims != nil {
		go a.runClaims(ctx)
	}
	// A change to a link of the VLAN wiring (a port's VLAN removed, the
	// uplink taken off the bridge) is repaired at once, not at the tick:
	// subscribed before the first repair, so that nothing changed after it
	// (and after Ready) goes unseen.
	links := a.subscribeLinks(ctx)
	// The same for nftables: another owner's change to a podwire table
	// (nft flush ruleset, an element deleted) is repaired at once.
	tables := a.watchTables(ctx)
	// And for the node's addresses and routes, which the node tables
	// follow (egress IPs, uplinks).
	envs := a.subscribeEnv(ctx)
	a.syncChain(ctx)
	// The tables at once, not at the first tick: Ready means they are laid
	// down (readyLocked).
	_ = a.repair(ctx) // a failure is retried from the loop (verified)
	a.readNode()
	a.markReady()
	a.syncTaint(ctx)
	if a.cfg.HealthAddr != "" {
		if err := a.serveHealth(ctx); err != nil {
			return err
		}
	}
	if a.cfg.MetricsAddr != "" {
		if err := a.m.serve(ctx, a.cfg.MetricsAddr, a.log); err != nil {
			return err
		}
	}
	watch, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("failed to watch CNI conf dir: %w", err)
	}
	defer watch.Close()
	if err := os.MkdirAll(a.cfg.Chain.ConfDir, 0o755); err != nil {
		return fmt.Errorf("failed to create CNI conf dir %q: %w", a.cfg.Chain.ConfDir, err)
	}
	if err := watch.Add(a.cfg.Chain.ConfDir); err != nil {
		return fmt.Errorf("failed to watch CNI conf dir %q: %w", a.cfg.Chain.ConfDir, err)
	}
	a.log.Info("agent running", "version", a.cfg.Version, "node", a.cfg.Node, "socket", a.cfg.Socket, "confDir", a.cfg.Chain.ConfDir)
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	backstop := time.NewTicker(a.cfg.RepairInterval)
	defer backstop.Stop()
	// repairDue is the settled repair of the whole node, after another
	// owner's change or a change of what the tables should be (egress
	// annotation, the cluster's CIDRs, unknown interfaces).
	var repairDue <-chan time.Time
	due := func(after time.Duration) {
		if repairDue == nil {
			repairDue = time.After(after)
		}
	}
	// unknownDue is the look for unknown interfaces, after a veth came
	// or went, or when one found passes its grace.
	var vlanDue, unknownDue, envDue <-chan time.Time
	graceDue := func() {
		if at, ok := a.unknownGraceEnds(); ok && unknownDue == nil {
			unknownDue = time.After(time.Until(at))
		}
	}
	// retry is the wait before a failed repair's next attempt: doubled
	// from a second up to repairRetryMax while it fails, so that a
	// transient failure waits for neither the backstop nor a change.
	var retry time.Duration
	repairNow := func() {
		// What the tables should be, read before the repair reads it:
		// a change after this read is seen again by the next look.
		if k, ok := a.envKey(); ok {
			a.env = k
		}
		if a.repair(ctx) {
			retry = 0
		} else {
			retry = min(max(2*retry, time.Second), repairRetryMax)
			due(retry)
		}
		graceDue()
	}
	// A primary's installer writes in several steps (temporary file,
	// rename): settle briefly after a burst of events.
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if a.superseded() {
				a.log.Info("agent stopping: superseded, podwire stays on the node")
				return nil
			}
			a.stop()
			return nil
		case ev := <-watch.Events:
			if filepath.Ext(ev.Name) != ".tmp" {
				settle = time.After(200 * time.Millisecond)
			}
		case err := <-watch.Errors:
			a.log.Warn("conf dir watch", "error", err)
		case _, ok := <-tables.readyChan():
			changes, lost := tables.take()
			if !ok {
				// The socket failed (ENOBUFS): subscribe again, and
				// repair, since a change may have been lost.
				tables = a.watchTables(ctx)
				lost = true
			}
			if lost || a.foreignChange(changes) {
				due(tableSettle)
			}
		case _, ok := <-envs:
			if !ok {
				envs = a.subscribeEnv(ctx)
				due(0) // a change may have been lost
				continue
			}
			if envDue == nil {
				envDue = time.After(envSettle)
			}
		case <-envDue:
			envDue = nil
			if k, ok := a.envKey(); ok && k != a.env && !a.superseded() {
				due(0)
			}
		case u, ok := <-links:
			if !ok {
				// The socket failed (ENOBUFS when notifications came
				// faster than this loop read them): subscribe again,
				// and repair, since a change may have been lost.
				links = a.subscribeLinks(ctx)
				vlanDue = time.After(vlanSettle)
				continue
			}
			if vlanDue == nil && a.watchesLink(u) {
				vlanDue = time.After(vlanSettle)
			}
			if unknownDue == nil && a.mayBeUnknown(u) {
				unknownDue = time.After(unknownSettle)
			}
		case <-vlanDue:
			vlanDue = nil
			if !a.superseded() {
				a.repairVLANs(ctx)
			}
		case <-unknownDue:
			unknownDue = nil
			if a.superseded() {
				continue
			}
			if a.unknownChanged(time.Now()) {
				due(0)
			} else if at, ok := a.unknownGraceEnds(); ok {
				unknownDue = time.After(time.Until(at))
			}
		case <-repairDue:
			repairDue = nil
			if !a.superseded() {
				repairNow()
			}
		case <-backstop.C:
			if !a.superseded() {
				repairNow()
			}
		case <-settle:
			settle = nil
			if !a.superseded() && a.syncChain(ctx) {
				due(0)
			}
		case <-tick.C:
			if a.superseded() {
				// Still ticking for /healthz; nothing of the node is
				// this agent's to change.
				a.mu.Lock()
				a.ticked = time.Now()
				a.mu.Unlock()
				continue
			}
			// A marker written while this agent runs (an older agent's
			// stop, decided as an uninstall, racing a reinstall): this
			// agent keeps podwire on the node.
			a.setErr("uninstall marker", a.clearUninstalled())
			chain := a.syncChain(ctx)
			egress, cluster := a.syncEgress(), a.syncCluster()
			if chain || egress || cluster || !a.verified() {
				// What the tables should be changed, or they were
				// never verified (podwire was not in a chain yet).
				due(0)
			}
			a.syncRoutes(ctx)
			a.collectStale(ctx)
			a.noteRevoked(ctx)
			a.readNode()
			a.markReady()
			a.syncTaint(ctx)
			a.mu.Lock()
			a.ticked = time.Now()
			a.mu.Unlock()
		}
	}
}

// Status is the agent's state now.
func (a *Agent) Status() agentapi.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.status
	st.PodsCached = a.pods.Cached()
	st.Ready = a.readyLocked() == nil
	st.Errors = nil
	for k, v := range a.errs {
		st.Errors = append(st.Errors, k+": "+v)
	}
	// By concern, not in map order: the same state reads the same.
	slices.Sort(st.Errors)
	return st
}

// setErr records (err non-nil) or clears the error of one concern, logging
// changes only.
func (a *Agent) setErr(what string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old, had := a.errs[what]
	switch {
	case err != nil && old != err.Error():
		a.errs[what] = err.Error()
		a.log.Error(what+" failed", "error", err)
	case err == nil && had:
		delete(a.errs, what)
		a.log.Info(what + " recovered")
	}
}

// syncChain installs the binary and puts podwire's entry back in the chain;
// a restore after the first sync is logged and recorded on the Node. It
// says whether the conflist holding podwire was written or is another
// file, either of which may change what the tables should be.
func (a *Agent) syncChain(ctx context.Context) bool {
	res, err := a.cfg.Chain.Sync()
	a.setErr("chain", err)
	if err != nil {
		return false
	}
	a.setErr("chain in use", a.cfg.Chain.InUse(res.Conflist))
	a.writePrimaryType(res.PrimaryType)
	a.mu.Lock()
	first := a.status.Conflist == ""
	moved := a.status.Conflist != res.Conflist
	a.status.Conflist, a.status.Mode = res.Conflist, res.Mode
	if res.ConflistChanged && !first {
		a.status.Restores++
		a.m.restores.WithLabelValues(res.Mode).Inc()
	}
	a.mu.Unlock()
	if res.BinaryChanged {
		a.log.Info("plugin binary installed", "binDir", a.cfg.Chain.BinDir)
	}
	if !res.ConflistChanged {
		return moved
	}
	if first {
		a.log.Info("podwire put in the chain", "conflist", res.Conflist, "primary", res.Primary, "mode", res.Mode)
		return true
	}
	msg := fmt.Sprintf("podwire's entry was missing from %s (primary %s rewritten): restored (mode %s)", res.Conflist, res.Primary, res.Mode)
	a.log.Warn(msg)
	a.ev.onNode(a.node.UID(), corev1.EventTypeNormal, ReasonChainRestored, msg)
	return true
}

// syncEgress writes the node's egress annotation when it changed, and
// says whether it did.
func (a *Agent) syncEgress() bool {
	v, changed, err := a.node.WriteEgress(time.Now())
	a.setErr("egress annotation", err)
	if changed {
		a.log.Info("node egress annotation written", "value", v)
	}
	a.mu.Lock()
	a.status.EgressIPs = v
	a.mu.Unlock()
	return changed
}

// syncCluster writes the cluster's pod CIDRs, node IPs and forwarded
// prefixes (the other Nodes' that pass the bounds, and this node's
// records') when they changed, and says whether it did: the repair that
// follows brings the egress table's exceptions up to date.
func (a *Agent) syncCluster() bool {
	if a.cfg.Cluster == nil {
		return false
	}
	_, local, err := a.recordRoutes()
	if err != nil {
		a.setErr("cluster CIDRs", err)
		return false
	}
	r, changed, err := a.cfg.Cluster.Write(a.cfg.Node, local, a.routableBounds)
	a.setErr("cluster CIDRs", err)
	if err == nil && a.cfg.Cluster.Synced() {
		a.mu.Lock()
		a.clusterWritten = true
		a.mu.Unlock()
	}
	if changed {
		a.log.Info("cluster CIDRs written", "nodes", r.Nodes, "podCIDRs", r.PodCIDRs, "nodeIPs", r.NodeIPs, "routes", r.Routes)
	}
	return changed
}

// repair verifies podwire's tables and repairs drift (repairTables); each
// repair is logged and recorded as an Event on the Node.
func (a *Agent) repair(ctx context.Context) bool {
	a.mu.Lock()
	conflist := a.status.Conflist
	a.mu.Unlock()
	if conflist == "" {
		return true // not in the chain yet: nothing says what the tables are
	}
	res, err := a.repairTables(ctx, conflist, time.Now())
	a.setErr("table repair", err)
	if err != nil {
		return false
	}
	a.noteUnknown(ctx, res.Unknown, time.Now())
	a.noteEgressErrors(ctx, res.Errors)
	a.noteVLAN(ctx, res)
	a.mu.Lock()
	a.tablesVerified = true
	a.mu.Unlock()
	if !res.Repaired {
		return true
	}
	a.m.repaired(res)
	tables := res.Tables
	now := time.Now()
	a.mu.Lock()
	a.status.Repairs++
	a.status.LastRepair = now.UTC()
	a.mu.Unlock()
	msg := fmt.Sprintf("podwire's nftables tables were missing or had drifted, and were repaired: rebuilt %v, deleted %v, elements re-added %v (wanted %v)",
		res.Rebuilt, res.Deleted, res.ElementsReadded, tables)
	a.log.Warn(msg)
	a.ev.onNode(a.node.UID(), corev1.EventTypeNormal, ReasonTablesRepaired, msg)
	return true
}

// readNode reads the records and the drop counters for /metrics, on the
// agent's goroutine (the node's netns); a failure is an agent error, shown
// by `podwire status`, and leaves the last good values out.
func (a *Agent) readNode() {
	a.setErr("metrics", a.m.readNode(a.cfg.StateDir, func() (map[string]sourcecheck.Drops, error) {
		// A one-shot connection: each request opens its socket in
		// the calling thread's netns.
		c, err := nftables.New()
		if err != nil {
			return nil, err
		}
		return sourcecheck.ReadDrops(c)
	}))
}

// readyLocked is nil when the agent can do its job: the informers have
// listed once, podwire is in the chain the runtime reads (Chain.InUse) and
// its node tables have been verified (and laid down or repaired) at least
// once.
func (a *Agent) readyLocked() error {
	switch {
	case !a.pods.Synced():
		return errors.New("pod informer not synced")
	case !a.node.Synced():
		return errors.New("node informer not synced")
	case !a.ns.Synced():
		return errors.New("namespace informer not synced")
	case a.cfg.Cluster != nil && !a.clusterWritten:
		return errors.New("the cluster's pod CIDRs not written yet")
	case a.status.Conflist == "":
		return errors.New("podwire not in the chain yet")
	case a.errs["chain"] != "":
		return errors.New("podwire's chain: " + a.errs["chain"])
	case a.errs["chain in use"] != "":
		return errors.New("podwire out of the runtime's chain: " + a.errs["chain in use"])
	case !a.tablesVerified:
		return errors.New("node tables not verified yet")
	}
	return nil
}

// serveHealth serves /healthz (the drift loop ticked recently) and /readyz
// (readyLocked) for the DaemonSet's probes.
func (a *Agent) serveHealth(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		last, started := a.ticked, a.status.Started
		a.mu.Unlock()
		if time.Since(started) > 10*a.cfg.Interval+time.Minute && time.Since(last) > 10*a.cfg.Interval {
			http.Error(w, fmt.Sprintf("drift loop stuck since %s", last.Format(time.RFC3339)), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if a.superseded() {
			// During a surge the kubelet probes the new pod on this
			// port until this agent stops: answer for the new owner, so
			// that the DaemonSet takes this agent away only once the
			// new one is Ready.
			if err := a.successorReady(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok (the node's new agent)")
			return
		}
		a.mu.Lock()
		err := a.readyLocked()
		a.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return serveWhenFree(ctx, a.cfg.HealthAddr, "/healthz and /readyz", srv, a.log)
}

// writePrimaryType writes the chain's primary plugin type into stateDir
// (config.PrimaryTypeName) when it differs from what is there, for the
// plugin's STATUS (a Cilium primary's pods bypass podwire's check).
func (a *Agent) writePrimaryType(typ string) {
	path := filepath.Join(a.cfg.StateDir, config.PrimaryTypeName)
	if old, err := os.ReadFile(path); err == nil && string(old) == typ {
		return
	}
	a.setErr("primary type", atomicfile.WriteFile(path, []byte(typ), 0o600))
}

// repairRetryMax bounds the wait between the attempts of a failing repair.
const repairRetryMax = 30 * time.Second

// verified reports whether a table repair has succeeded since the start.
func (a *Agent) verified() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tablesVerified
}
