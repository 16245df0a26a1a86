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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/state"
)

// Config is what the agent works on.
type Config struct {
	Node     string
	StateDir string
	// ID names this agent in stateDir's owner file (handover.go): the
	// pod's UID (the DaemonSet's POD_UID), unique per agent process.
	ID      string
	Version string
	Chain   Chain
	Serve   Serve
	Timing  Timing
	// Taint is the startup taint the agent keeps (taint.go).
	Taint Taint
	// Cluster is what the agent follows of the cluster beyond its Node.
	Cluster ClusterWatch
	// UnknownInterfaces is what the agent does about pod interfaces without
	// a podwire record: UnknownReport, UnknownDrop, or "" (nothing).
	UnknownInterfaces string
	// NodeStatus writes the node's PodwireNodeStatus (NodeStatusResource,
	// nodestatus.go); nil: no report is written.
	NodeStatus dynamic.ResourceInterface
}

// Serve is where the agent answers.
type Serve struct {
	// Socket is the unix socket the plugin asks (default StateDir/agent.sock).
	Socket string
	// HealthAddr serves /healthz and /readyz ("" = none), e.g. 127.0.0.1:9765.
	HealthAddr string
	// MetricsAddr serves /metrics ("" = none), e.g. :9178.
	MetricsAddr string
}

// Timing is the reconcilers' backstops: each runs when what it follows
// changes, and at these periods in case a notification was lost.
type Timing struct {
	// Interval is the backstop of the chain's reconciler (default 10 s):
	// the conf dir is watched (a lost event, an overflow of the watch's
	// queue, triggers it too), but whether the runtime reads podwire's
	// conflist (Chain.InUse) also depends on files outside it.
	Interval time.Duration
	// RepairInterval is the backstop of the node tables' repair and of
	// the other reconcilers that follow the kernel or the API (default
	// 60 s): drift is seen from nftables' and the links' notifications
	// and repaired within tableSettle.
	RepairInterval time.Duration
	// CollectGrace is how long a record's pod must have been absent from
	// the node, and how old the record must be, before the record is
	// collected (collect.go; default 60 s).
	CollectGrace time.Duration
}

// Taint is the startup taint's configuration (taint.go).
type Taint struct {
	// Key is the startup taint's key (DefaultStartupTaint), which the
	// agent removes once Ready and puts back while podwire is out of the
	// runtime's chain; "" or a nil Nodes: the agent leaves taints alone.
	Key string
	// Effect is the effect the agent puts the taint back with (empty:
	// NoSchedule). It removes the taint whatever its effect: nodes are
	// registered with NoExecute.
	Effect corev1.TaintEffect
	Nodes  corev1client.NodesGetter
}

// ClusterWatch is what the agent follows of the cluster beyond its Node;
// each is optional.
type ClusterWatch struct {
	// Nodes follows every Node for the egress table's exceptions and the
	// routes to other nodes' forwarding pods (nil: none are written; the
	// agent is Ready without them).
	Nodes *ClusterNodes
	// Claims holds the node's pods' claims across the cluster (claims.go);
	// nil: the agent answers every claim with CNI error 11.
	Claims *Claims
	// Uninstall, when set (the chart's cni.uninstall), takes podwire out of
	// the node when the agent's stop is an uninstall (uninstall.go); nil:
	// stopping changes nothing on the node.
	Uninstall *Uninstall
}

// Agent runs the agent's reconcilers and serves the plugin; build it with
// New.
type Agent struct {
	cfg Config
	log *slog.Logger
	api informers
	m   *metrics
	// ev records the agent's Events on its Node and on pods (events.go),
	// from Run's start.
	ev *events
	// run runs the reconcilers of the node (on Run's goroutine, in the
	// node's netns); claims runs the cluster claims' reconciler, whose
	// API requests must not hold a repair back.
	run, claims *runner
	st          nodeState
	// tables and memo are the reconcilers' memories (each file says
	// which is its own).
	tables tableMemo
	memo   passMemo
	// report is the node status reconciler's memory (nodestatus.go).
	report nodeReport
}

// informers are the agent's API clients and caches.
type informers struct {
	md     metadata.Interface
	events corev1client.EventsGetter
	pods   *Pods
	ns     *Namespaces
	node   *Node
}

// nodeState is the agent's state that the socket, the health server and the
// reconcilers share, under mu.
type nodeState struct {
	mu     sync.Mutex
	status agentapi.Status
	// findings are what the reconcilers found wrong that a retry would
	// not fix (an egress IP refused, a Node's data refused), by concern;
	// shown with the reconcilers' errors.
	findings map[string]string
	// outOfChain is why podwire is not in the chain the runtime reads (""
	// when it is): the chain's sync or InUse failed.
	outOfChain string
	// tablesVerified: a table repair (verify, rebuild what differs) has
	// succeeded since the start; clusterWritten: the cluster's CIDRs have
	// been written once.
	tablesVerified, clusterWritten bool
	// lastRepaired is what the last repair of the tables did, one line.
	lastRepaired string
	// ready is the readiness after the last pass (readinessChanged).
	ready bool
	// successor is the agent that took the node over ("" while this one
	// owns it): then this one changes nothing more (handover.go).
	successor string
	// claimed is when this agent claimed the node; ownerReady: its owner
	// file says it is Ready.
	claimed    time.Time
	ownerReady bool
}

// tableMemo is the node tables' and their watchers' memory.
type tableMemo struct {
	// own tells this agent's commits from other owners' (nftwatch.go).
	own *ownGens
	// env is envKey before the last repair (nodeenv.go).
	env string
	// unknown and reported: when each interface without a record was
	// first seen, and those already reported (unknown.go).
	unknown  unknownSeen
	reported map[string]bool
	// vlanLinks are the links of the VLAN wiring the last repair named
	// (vlan.go), under nodeState.mu: the link watcher reads them.
	vlanLinks map[string]bool
	// kernel is the subscriptions to the kernel's notifications
	// (notify.go).
	kernel kernelWatch
	// stale: a trigger since the last repair said the tables may differ
	// from what they should be (repairDue); clear, the backstop's pass
	// verifies only when nftables' generation moved since verifiedGen,
	// the generation after the last repair (genKnown: there was one).
	stale       atomic.Bool
	verifiedGen uint32
	genKnown    bool
}

// passMemo is what the API-facing reconcilers last did, so that a pass with
// nothing changed costs no request.
type passMemo struct {
	taint     taintMemo
	routes    routeSync
	revoked   revokedSync
	collector *staleCollector
}

// New builds an agent from API clients (in-cluster in cmd/podwire-agent,
// fakes in tests). events may be nil (no Events recorded).
func New(cfg Config, md metadata.Interface, events corev1client.EventsGetter, log *slog.Logger) *Agent {
	if cfg.Serve.Socket == "" {
		cfg.Serve.Socket = filepath.Join(cfg.StateDir, config.AgentSocketName)
	}
	if cfg.Timing.Interval == 0 {
		cfg.Timing.Interval = 10 * time.Second
	}
	if cfg.Timing.RepairInterval == 0 {
		cfg.Timing.RepairInterval = 60 * time.Second
	}
	if cfg.Timing.CollectGrace == 0 {
		cfg.Timing.CollectGrace = collectGrace
	}
	if cfg.ID == "" {
		// Outside a pod: unique to this process.
		cfg.ID = fmt.Sprintf("pid-%d-%x", os.Getpid(), time.Now().UnixNano())
	}
	a := &Agent{
		cfg: cfg, log: log, m: newMetrics(cfg.Version),
		api: informers{
			md: md, events: events,
			pods: NewPods(md, cfg.Node, 10*time.Minute),
			ns:   NewNamespaces(md, 10*time.Minute),
			node: NewNode(md, cfg.Node, cfg.StateDir, 10*time.Minute),
		},
		run: newRunner(), claims: newRunner(),
		st: nodeState{
			status:   agentapi.Status{Node: cfg.Node, Version: cfg.Version, Started: time.Now().UTC()},
			findings: map[string]string{},
		},
		tables: tableMemo{own: newOwnGens()},
		report: nodeReport{client: cfg.NodeStatus, kick: make(chan struct{}, 1)},
	}
	a.m.state.a = a
	a.addReconcilers()
	return a
}

// Names of the agent's reconcilers, as `podwire status` and /readyz show
// them.
const (
	recNotify  = "kernel notifications"
	recChain   = "chain"
	recEgress  = "egress"
	recTables  = "node tables"
	recEnv     = "node addresses"
	recVLAN    = "vlan wiring"
	recUnknown = "unknown interfaces"
	recRoutes  = "routes"
	recGates   = "gate check"
	recCollect = "stale attachments"
	recTaint   = "startup taint"
	recMetrics = "metrics"
	recClaims  = "cluster claims"
	recStatus  = "node status"
)

// recordSettle is how long the reconcilers that follow the records wait
// after a record is written or removed: a burst of ADDs makes one pass.
const recordSettle = 500 * time.Millisecond

// addReconcilers registers the reconcilers the config asks for, in the order
// of the agent's start: the chain before the tables it decides, the tables
// before the taint that waits for them. Each file holds its reconciler's
// pass and says what triggers it.
func (a *Agent) addReconcilers() {
	every := a.cfg.Timing.RepairInterval
	a.run.add(&reconciler{name: recNotify, do: a.reconcileNotify})
	a.run.add(&reconciler{name: recChain, do: a.reconcileChain, every: a.cfg.Timing.Interval})
	a.run.add(&reconciler{name: recEgress, do: a.reconcileEgress, every: every, minGap: floodGap})
	a.run.add(&reconciler{name: recTables, do: a.reconcileTables, every: every})
	a.run.add(&reconciler{name: recEnv, do: a.reconcileEnv})
	a.run.add(&reconciler{name: recVLAN, do: a.reconcileVLANs})
	if a.cfg.UnknownInterfaces != "" {
		a.run.add(&reconciler{name: recUnknown, do: a.reconcileUnknown})
	}
	a.run.add(&reconciler{name: recRoutes, do: a.reconcileRoutes, every: resyncEvery, minGap: floodGap})
	a.run.add(&reconciler{name: recGates, do: a.reconcileGates, every: resyncEvery, minGap: time.Second})
	a.run.add(&reconciler{name: recCollect, do: a.reconcileCollect, every: every, minGap: time.Second})
	if a.cfg.Taint.Key != "" && a.cfg.Taint.Nodes != nil {
		a.run.add(&reconciler{name: recTaint, do: a.reconcileTaint, every: every, minGap: time.Second})
	}
	if a.cfg.Serve.MetricsAddr != "" {
		a.run.add(&reconciler{name: recMetrics, do: a.reconcileMetrics})
	}
	if a.report.client != nil {
		a.run.add(&reconciler{name: recStatus, do: a.reconcileStatus, every: statusEvery, minGap: statusGap})
	}
	a.run.after = a.readinessChanged
	if a.cfg.Cluster.Claims != nil {
		a.claims.add(&reconciler{name: recClaims, do: a.reconcileClaims, every: claimSyncEvery})
	}
}

// floodGap is the least time between two passes of the reconcilers that
// follow every Node (egress, routes): another node's kubelet may rewrite
// its Node's annotation in a loop, and each pass reads every Node's data.
// A change after a quiet spell is applied at once.
const floodGap = 3 * time.Second

// recordsChanged triggers the reconcilers that follow the node's records
// (an ADD or a DEL wrote or removed one), settled: a burst of ADDs makes
// one pass each.
func (a *Agent) recordsChanged() {
	for _, name := range []string{recEgress, recRoutes, recGates, recCollect, recVLAN, recStatus} {
		a.run.trigger(name, recordSettle)
	}
	a.claims.trigger(recClaims, recordSettle)
}

// Run runs the agent until ctx ends: the socket and the informers first,
// then the notifications it follows, the health and metrics servers, and
// the reconcilers, on this goroutine (whose thread is in the node's netns).
func (a *Agent) Run(ctx context.Context) error {
	if err := ensureStateDir(a.cfg.StateDir); err != nil {
		return err
	}
	a.ev = newEvents(a.api.events, a.cfg.Node, nil)
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
	a.followAPI()
	go a.api.pods.Run(ctx)
	go a.api.ns.Run(ctx)
	go a.api.node.Run(ctx)
	if c := a.cfg.Cluster; c.Nodes != nil {
		go c.Nodes.Run(ctx)
	}
	if c := a.cfg.Cluster; c.Uninstall != nil {
		go c.Uninstall.Run(ctx)
	}
	if a.report.client != nil {
		go a.writeStatuses(ctx)
	}
	if c := a.cfg.Cluster; c.Claims != nil {
		go c.Claims.routes.Run(ctx.Done())
		go a.claims.run(ctx, a.superseded)
	}
	if err := a.followFiles(ctx); err != nil {
		return err
	}
	if a.cfg.Serve.HealthAddr != "" {
		if err := a.serveHealth(ctx); err != nil {
			return err
		}
	}
	if a.cfg.Serve.MetricsAddr != "" {
		if err := a.m.serve(ctx, a.cfg.Serve.MetricsAddr, a.log, func(ctx context.Context) { a.run.waitPass(ctx, recMetrics) }); err != nil {
			return err
		}
	}
	a.log.Info("agent running", "version", a.cfg.Version, "node", a.cfg.Node, "socket", a.cfg.Serve.Socket, "confDir", a.cfg.Chain.ConfDir)
	a.run.run(ctx, a.superseded)
	if a.superseded() {
		a.log.Info("agent stopping: superseded, podwire stays on the node")
		return nil
	}
	a.stop()
	return nil
}

// followAPI triggers the reconcilers that follow the informers' objects.
// The handlers run on the informers' goroutines and only trigger.
func (a *Agent) followAPI() {
	onChange(a.api.node.informer, func() {
		a.run.trigger(recEgress, 0)
		a.run.trigger(recRoutes, 0) // a hand-set podwire.io/routes is put back
		a.run.trigger(recTaint, 0)
	})
	onChange(a.api.pods.informer, func() { a.run.trigger(recCollect, recordSettle) })
	onChange(a.api.ns.informer, func() { a.run.trigger(recGates, recordSettle) })
	if c := a.cfg.Cluster.Nodes; c != nil {
		c.onChange(func() {
			a.run.trigger(recEgress, 0)
			a.run.trigger(recRoutes, 0)
		})
	}
	if c := a.cfg.Cluster.Claims; c != nil {
		// A claim landing after the Node's annotation routes at once.
		onChange(c.routes, func() { a.run.trigger(recRoutes, 0) })
	}
}

// followFiles watches the CNI conf dir (a primary's rewrite: the chain)
// and stateDir (the records: what the routes, the egress exceptions, the
// gates and the collector follow) until ctx ends.
func (a *Agent) followFiles(ctx context.Context) error {
	watch, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("failed to watch CNI conf dir: %w", err)
	}
	if err := os.MkdirAll(a.cfg.Chain.ConfDir, 0o755); err != nil {
		watch.Close()
		return fmt.Errorf("failed to create CNI conf dir %q: %w", a.cfg.Chain.ConfDir, err)
	}
	for _, dir := range []string{a.cfg.Chain.ConfDir, a.cfg.StateDir} {
		if err := watch.Add(dir); err != nil {
			watch.Close()
			return fmt.Errorf("failed to watch %q: %w", dir, err)
		}
	}
	confDir := filepath.Clean(a.cfg.Chain.ConfDir)
	go func() {
		defer watch.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-watch.Events:
				switch {
				case filepath.Dir(ev.Name) == confDir:
					// A primary's installer writes in several steps
					// (temporary file, rename): settle briefly.
					if filepath.Ext(ev.Name) != ".tmp" {
						a.run.trigger(recChain, 200*time.Millisecond)
					}
				case state.IsRecordName(filepath.Base(ev.Name)):
					a.recordsChanged()
				case filepath.Base(ev.Name) == OwnerName:
					// Maybe a new agent's claim: the runner's next
					// pass finds it (superseded) and stops changing
					// the node.
					a.run.trigger(recChain, 0)
				}
			case err := <-watch.Errors:
				// An overflow of the watch's queue loses events: look
				// at what they may have changed.
				a.log.Warn("conf dir or state dir watch", "error", err)
				a.run.trigger(recChain, 0)
				a.recordsChanged()
			}
		}
	}()
	return nil
}

// Status is the agent's state now.
func (a *Agent) Status() agentapi.Status {
	recs := append(a.run.statuses(), a.claims.statuses()...)
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	st := a.st.status
	st.PodsCached = a.api.pods.Cached()
	st.Ready = a.readyLocked() == nil
	st.Reconcilers = recs
	st.Errors = nil
	for k, v := range a.st.findings {
		st.Errors = append(st.Errors, k+": "+v)
	}
	for _, r := range recs {
		if r.LastError != "" {
			st.Errors = append(st.Errors, r.Name+": "+r.LastError)
		}
	}
	// By concern, not in map order: the same state reads the same.
	slices.Sort(st.Errors)
	return st
}

// setFinding records (err non-nil) or clears a finding of one concern,
// logging changes only.
func (a *Agent) setFinding(what string, err error) {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	old, had := a.st.findings[what]
	switch {
	case err != nil && old != err.Error():
		a.st.findings[what] = err.Error()
		a.log.Error(what, "error", err)
	case err == nil && had:
		delete(a.st.findings, what)
		a.log.Info(what + ": resolved")
	}
}

// readinessChanged runs after every pass: when the agent became Ready it
// says so in the owner file (handover.go), and when its readiness changed
// the startup taint follows.
func (a *Agent) readinessChanged() {
	a.st.mu.Lock()
	ready := a.readyLocked() == nil
	changed := ready != a.st.ready
	a.st.ready = ready
	a.st.mu.Unlock()
	if changed {
		a.log.Info("agent readiness", "ready", ready)
		a.markReady()
		a.run.trigger(recTaint, 0)
	}
	a.statusChanged()
}

// readyLocked is nil when the agent can do its job: the informers have
// listed once, podwire is in the chain the runtime reads (Chain.InUse) and
// its node tables have been verified (and laid down or repaired) at least
// once.
func (a *Agent) readyLocked() error {
	switch {
	case !a.api.pods.Synced():
		return errors.New("pod informer not synced")
	case !a.api.node.Synced():
		return errors.New("node informer not synced")
	case !a.api.ns.Synced():
		return errors.New("namespace informer not synced")
	case a.cfg.Cluster.Nodes != nil && !a.st.clusterWritten:
		return errors.New("the cluster's pod CIDRs not written yet")
	case a.st.outOfChain != "":
		return errors.New("podwire out of the runtime's chain: " + a.st.outOfChain)
	case a.st.status.Conflist == "":
		return errors.New("podwire not in the chain yet")
	case !a.st.tablesVerified:
		return errors.New("node tables not verified yet")
	}
	return nil
}

// serveHealth serves /healthz (no reconciler's pass stuck) and /readyz
// (readyLocked, and each reconciler's last pass) for the DaemonSet's
// probes.
func (a *Agent) serveHealth(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if name, since := a.run.stuck(healthStuck); name != "" {
			http.Error(w, fmt.Sprintf("reconciler %q stuck in a pass since %s", name, since.Format(time.RFC3339)), http.StatusServiceUnavailable)
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
		st := a.Status()
		a.st.mu.Lock()
		err := a.readyLocked()
		a.st.mu.Unlock()
		var b strings.Builder
		for _, r := range st.Reconcilers {
			fmt.Fprintf(&b, "reconciler %s: %d passes, last success %s", r.Name, r.Runs, stamp3339(r.LastSuccess))
			if r.LastError != "" {
				fmt.Fprintf(&b, ", failing since %s: %s", stamp3339(r.ErrorSince), r.LastError)
			}
			b.WriteString("\n")
		}
		if err != nil {
			http.Error(w, err.Error()+"\n"+b.String(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok\n"+b.String())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return serveWhenFree(ctx, a.cfg.Serve.HealthAddr, "/healthz and /readyz", srv, a.log)
}

// healthStuck is how long one pass may run before /healthz fails: longer
// than any pass's own bounds (an API request's, a repair's 30 s).
const healthStuck = 5 * time.Minute

// stamp3339 is t in RFC 3339, or "never".
func stamp3339(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format(time.RFC3339)
}
