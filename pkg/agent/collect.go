package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/state"
)

// collectGrace is the default of Config.CollectGrace: how long a record's
// pod must have been absent from the node's pod informer, and how old the
// record must be, before the agent
// asks the API whether the pod is gone: the runtime's own DEL of a deleted
// pod runs within seconds of its sandbox's stop, and an ADD under way may
// write its record before the informer has delivered its pod.
const collectGrace = 60 * time.Second

// ReasonAttachmentCollected is the reason of the Node Event naming an
// attachment the agent removed because its pod was gone and the runtime
// never ran its DEL.
const ReasonAttachmentCollected = "PodwireAttachmentCollected"

// staleCollector removes stale attachments: records whose pod is gone from
// the node while the runtime never ran their DEL (a sandbox removed behind
// its back; containerd never calls CNI GC). Their routes, elements and
// claims would otherwise stay for good, and a stale claim refuses the next
// pod that asks for the same route or address.
//
// A record is collected only when its pod's UID has been absent from the
// informer of the node's pods for collectGrace while the informer was
// synced, the record is older than collectGrace, and the API confirms it
// (no pod of that name on the node, or one of another UID: a recreated
// pod). Any error of the API postpones it, so a pod that runs is never
// collected, whatever the API's state. The removal is the plugin's own
// DEL (`podwire collect`, run).
type staleCollector struct {
	pods  *Pods
	store *state.Store
	grace time.Duration
	// run removes one attachment by DEL's path; the agent's runs the
	// installed plugin's `podwire collect`.
	run func(ctx context.Context, rec *state.Record) (*cliapi.CollectResult, error)
	// absent is when each record (by key) was first seen with its pod
	// absent from a synced informer.
	absent map[string]time.Time
}

// collection is the outcome of one sync: the records collected, those
// postponed (the API could not confirm) and the errors of the removals.
type collection struct {
	collected []*state.Record
	postponed []string
	errs      []error
	// next is when the first record still within its grace passes it
	// (zero: none is).
	next time.Time
}

// sync collects the records that are stale at now. Without a synced
// informer it does nothing and forgets what it saw: a pod absent from an
// unsynced cache says nothing.
func (c *staleCollector) sync(ctx context.Context, now time.Time) collection {
	var out collection
	if !c.pods.Synced() {
		c.absent = nil
		return out
	}
	// Unreadable records are skipped: the plugin cannot act on them either.
	recs, _ := c.store.List()
	running := c.pods.uids()
	seen := map[string]time.Time{}
	for _, rec := range recs {
		if rec.PodUID == "" || running[rec.PodUID] {
			continue // no pod to ask about, or its pod runs here
		}
		first, ok := c.absent[rec.Key()]
		if !ok {
			first = now
		}
		seen[rec.Key()] = first
		if now.Sub(first) < c.grace || now.Sub(rec.Created) < c.grace {
			if at := maxTime(first, rec.Created).Add(c.grace); out.next.IsZero() || at.Before(out.next) {
				out.next = at
			}
			continue
		}
		m, err := c.pods.get(ctx, rec.PodNamespace, rec.PodName)
		if err != nil {
			out.postponed = append(out.postponed, fmt.Sprintf("%s (pod %s): %v", rec.Key(), rec.PodRef(), err))
			// Asked again soon: the API may answer then.
			if at := now.Add(min(max(c.grace/4, time.Second), 15*time.Second)); out.next.IsZero() || at.Before(out.next) {
				out.next = at
			}
			continue
		}
		if m != nil && string(m.UID) == rec.PodUID {
			delete(seen, rec.Key()) // the informer lags: the pod runs
			continue
		}
		res, err := c.run(ctx, rec)
		if err != nil {
			out.errs = append(out.errs, fmt.Errorf("attachment %s (pod %s): %w", rec.Key(), rec.PodRef(), err))
			continue
		}
		delete(seen, rec.Key())
		if res.Collected {
			out.collected = append(out.collected, rec)
		}
	}
	c.absent = seen
	return out
}

// uids is the set of UIDs of the pods in the informer's cache (of this
// node); it reads only each object's UID.
func (p *Pods) uids() map[string]bool {
	objs := p.informer.GetStore().List()
	out := make(map[string]bool, len(objs))
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil {
			out[string(m.GetUID())] = true
		}
	}
	return out
}

// runCollect runs the installed plugin's `podwire collect` for rec with
// the conflist holding podwire.
func runCollect(ctx context.Context, plugin, conflist string, rec *state.Record) (*cliapi.CollectResult, error) {
	cmd := exec.CommandContext(ctx, plugin, "collect", "--conflist", conflist, "--key", rec.Key(), "--uid", rec.PodUID)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s collect: %v: %s", plugin, err, strings.TrimSpace(stderr.String()))
	}
	var res cliapi.CollectResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("%s collect: bad output %q: %w", plugin, out, err)
	}
	return &res, nil
}

// reconcileCollect runs the stale collector (staleCollector) once the
// agent is in the chain, and logs and records on the Node each attachment
// it removed.
//
// Triggers: a pod of the node added, changed or deleted (the informer), a
// record written or removed, the end of an absent pod's grace (sync's
// next); Timing.RepairInterval as a backstop.
func (a *Agent) reconcileCollect(ctx context.Context) error {
	conflist := a.conflist()
	if conflist == "" {
		return nil
	}
	if a.memo.collector == nil {
		plugin := filepath.Join(a.cfg.Chain.BinDir, "podwire")
		a.memo.collector = &staleCollector{pods: a.api.pods, store: state.New(a.cfg.StateDir), grace: a.cfg.Timing.CollectGrace}
		a.memo.collector.run = func(ctx context.Context, rec *state.Record) (*cliapi.CollectResult, error) {
			conflist := a.conflist()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return runCollect(cctx, plugin, conflist, rec)
		}
	}
	now := time.Now()
	res := a.memo.collector.sync(ctx, now)
	for _, p := range res.postponed {
		a.log.Info("stale attachment: collection postponed, the API could not confirm its pod is gone", "attachment", p)
	}
	if !res.next.IsZero() {
		a.run.triggerAt(recCollect, res.next)
	}
	for _, rec := range res.collected {
		msg := fmt.Sprintf("attachment %s of pod %s (UID %s) collected: the pod is gone from the node and the runtime never ran its DEL; its routes, set elements and claims were removed by DEL's path",
			rec.Key(), rec.PodRef(), rec.PodUID)
		a.log.Warn(msg)
		a.ev.onNode(a.api.node.UID(), corev1.EventTypeNormal, ReasonAttachmentCollected, msg)
	}
	return errors.Join(res.errs...)
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
