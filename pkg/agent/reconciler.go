package agent

import (
	"context"
	"sync"
	"time"

	"github.com/podwire/podwire/pkg/agentapi"
)

// A reconciler brings one part of the node (or of its Node) to what it
// should be: the chain, the node tables, the VLAN wiring, the routes to
// other nodes' forwarding pods, the startup taint. It runs when something
// it follows changed (trigger: a kernel notification, an informer's event,
// a write in the CNI conf dir or stateDir, another reconciler's change),
// at its interval as a backstop against a lost notification, and after a
// failure again with backoff (1 s doubled up to reconcileRetryMax), as
// cilium's controllers and kube-proxy's BoundedFrequencyRunner do. A
// trigger cuts a backoff short: what failed may work now.
type reconciler struct {
	name string
	// do runs one pass; an error is the pass's failure (retried with
	// backoff and shown in the reconciler's status), not a finding about
	// the node (the agent's findings: setFinding).
	do func(ctx context.Context) error
	// every is the backstop's period after a pass (0: none, the pass runs
	// only when triggered).
	every time.Duration
	// minGap bounds how often triggers run it: a trigger within minGap of
	// the last pass's end waits for minGap to pass, as kube-proxy's
	// BoundedFrequencyRunner's minInterval does. For the reconcilers that
	// follow what others write (a Node's annotation rewritten in a loop),
	// so that a flood costs a pass per minGap, not a pass per write.
	minGap  time.Duration
	lastEnd time.Time
	// ends counts its passes, held-back ones included (waitPass).
	ends int

	// Under the runner's lock:
	due     time.Time // zero: not due
	backoff time.Duration
	status  agentapi.ReconcilerStatus
}

// reconcileRetryMax bounds the wait between the attempts of a failing
// reconciler.
const reconcileRetryMax = 30 * time.Second

// runner runs its reconcilers one at a time on the goroutine of run, which
// is the agent's: its thread is in the node's netns, where the
// notifications were subscribed and the node's links and tables are. One
// at a time, so that no two passes change the node together.
type runner struct {
	mu      sync.Mutex
	recs    []*reconciler
	byName  map[string]*reconciler
	wake    chan struct{}
	running *reconciler
	since   time.Time // when running started
	// after runs after every pass, on the runner's goroutine.
	after func()
	// done is closed and replaced after every pass (waitPass).
	done chan struct{}
	// retryMin and retryMax bound a failing reconciler's backoff.
	retryMin, retryMax time.Duration
}

func newRunner() *runner {
	return &runner{byName: map[string]*reconciler{}, wake: make(chan struct{}, 1), done: make(chan struct{}),
		retryMin: time.Second, retryMax: reconcileRetryMax}
}

// add registers r, due at once.
func (rn *runner) add(r *reconciler) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	r.due = time.Now()
	r.status.Name = r.name
	rn.recs = append(rn.recs, r)
	rn.byName[r.name] = r
}

// trigger makes the reconciler name due within after (an earlier due time
// stays). Unknown names are ignored: a reconciler the config leaves out.
// Safe from any goroutine.
func (rn *runner) trigger(name string, after time.Duration) {
	rn.mu.Lock()
	r := rn.byName[name]
	if r != nil {
		at := time.Now().Add(after)
		if r.minGap > 0 && !r.lastEnd.IsZero() {
			at = maxTime(at, r.lastEnd.Add(r.minGap))
		}
		if r.due.IsZero() || at.Before(r.due) {
			r.due = at
		}
	}
	rn.mu.Unlock()
	if r != nil {
		select {
		case rn.wake <- struct{}{}:
		default:
		}
	}
}

// triggerAt is trigger with a time.
func (rn *runner) triggerAt(name string, at time.Time) { rn.trigger(name, time.Until(at)) }

// run runs the reconcilers as they fall due until ctx ends. skip, asked
// before each pass, holds every pass back while it is true (an agent
// superseded by another on the node changes nothing).
func (rn *runner) run(ctx context.Context, skip func() bool) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r, wait := rn.next(time.Now())
		if r == nil {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-rn.wake:
			case <-timer.C:
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if skip != nil && skip() {
			rn.finish(r, time.Now(), nil, true)
			continue
		}
		start := time.Now()
		rn.mu.Lock()
		// A trigger from now on makes it due again: what triggered it
		// may postdate what the pass reads.
		r.due = time.Time{}
		rn.running, rn.since = r, start
		rn.mu.Unlock()
		err := r.do(ctx)
		rn.finish(r, start, err, false)
		if rn.after != nil {
			rn.after()
		}
	}
}

// next is the reconciler due first, if one is due at now, or how long
// until one is (an hour when none will be).
func (rn *runner) next(now time.Time) (*reconciler, time.Duration) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	var first *reconciler
	for _, r := range rn.recs {
		if !r.due.IsZero() && (first == nil || r.due.Before(first.due)) {
			first = r
		}
	}
	if first == nil {
		return nil, time.Hour
	}
	if wait := first.due.Sub(now); wait > 0 {
		return nil, wait
	}
	return first, 0
}

// finish records a pass of r that started at start and ended with err
// (skipped: held back), and schedules its next: the backstop, or the
// retry after a failure.
func (rn *runner) finish(r *reconciler, start time.Time, err error, skipped bool) {
	now := time.Now()
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.running = nil
	r.lastEnd = now
	r.ends++
	if skipped {
		r.due = time.Time{}
	}
	schedule := func(after time.Duration) {
		if at := now.Add(after); r.due.IsZero() || at.Before(r.due) {
			r.due = at
		}
	}
	switch {
	case skipped:
		if r.every > 0 {
			schedule(r.every)
		}
	case err != nil:
		r.backoff = min(max(2*r.backoff, rn.retryMin), rn.retryMax)
		schedule(r.backoff)
		r.status.Runs++
		r.status.Failures++
		if r.status.LastError != err.Error() {
			r.status.ErrorSince = now.UTC()
		}
		r.status.LastError = err.Error()
		r.status.LastRun = now.UTC()
		r.status.Took = now.Sub(start)
	default:
		r.backoff = 0
		if r.every > 0 {
			schedule(r.every)
		}
		r.status.Runs++
		r.status.LastError, r.status.ErrorSince = "", time.Time{}
		r.status.LastRun, r.status.LastSuccess = now.UTC(), now.UTC()
		r.status.Took = now.Sub(start)
	}
	close(rn.done)
	rn.done = make(chan struct{})
}

// waitPass triggers name and waits until a pass of it has ended (or was
// held back: an agent superseded on the node answers with what it last
// read), or ctx ends: for a read that must be made on the runner's goroutine (in the
// node's netns) but only when asked (a scrape of /metrics).
func (rn *runner) waitPass(ctx context.Context, name string) {
	rn.mu.Lock()
	r := rn.byName[name]
	var ends int
	if r != nil {
		ends = r.ends
	}
	rn.mu.Unlock()
	if r == nil {
		return
	}
	rn.trigger(name, 0)
	for {
		rn.mu.Lock()
		done, n := rn.done, r.ends
		rn.mu.Unlock()
		if n > ends {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-done:
		}
	}
}

// statuses is every reconciler's status, in registration order.
func (rn *runner) statuses() []agentapi.ReconcilerStatus {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	out := make([]agentapi.ReconcilerStatus, len(rn.recs))
	for i, r := range rn.recs {
		out[i] = r.status
		out[i].Due = r.due.UTC()
		if r.due.IsZero() {
			out[i].Due = time.Time{}
		}
	}
	return out
}

// stuck reports the reconciler whose pass has run for longer than limit
// ("" when none), for /healthz.
func (rn *runner) stuck(limit time.Duration) (name string, since time.Time) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.running != nil && time.Since(rn.since) > limit {
		return rn.running.name, rn.since
	}
	return "", time.Time{}
}
