package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mustPass fails the test on a reconciler pass's error.
func mustPass(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("pass failed: %v", err)
	}
}

// passLog records the passes of the test's reconcilers.
type passLog struct {
	mu     sync.Mutex
	passes map[string][]time.Time
}

func (l *passLog) do(name string, err func(n int) error) func(context.Context) error {
	return func(context.Context) error {
		l.mu.Lock()
		if l.passes == nil {
			l.passes = map[string][]time.Time{}
		}
		l.passes[name] = append(l.passes[name], time.Now())
		n := len(l.passes[name])
		l.mu.Unlock()
		if err != nil {
			return err(n)
		}
		return nil
	}
}

func (l *passLog) count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.passes[name])
}

func (l *passLog) times(name string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.passes[name]...)
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func startRunner(t *testing.T, rn *runner, skip func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rn.run(ctx, skip) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestRunnerTriggers: every reconciler runs once at the start; afterwards
// a reconciler without a backstop runs only when triggered, one with a
// backstop also at its period, and a trigger during a pass runs it again
// after the pass (what triggered it may postdate what the pass read).
func TestRunnerTriggers(t *testing.T) {
	var l passLog
	rn := newRunner()
	inPass := make(chan struct{})
	release := make(chan struct{})
	var blocked atomic.Bool
	rn.add(&reconciler{name: "quiet", do: l.do("quiet", nil)})
	rn.add(&reconciler{name: "polled", do: l.do("polled", nil), every: 20 * time.Millisecond})
	rn.add(&reconciler{name: "slow", do: func(ctx context.Context) error {
		if blocked.Load() {
			inPass <- struct{}{}
			<-release
		}
		return l.do("slow", nil)(ctx)
	}})
	startRunner(t, rn, nil)
	waitFor(t, "the first passes", func() bool { return l.count("quiet") == 1 && l.count("slow") == 1 })
	waitFor(t, "the backstop's passes", func() bool { return l.count("polled") >= 4 })
	if n := l.count("quiet"); n != 1 {
		t.Errorf("an untriggered reconciler without a backstop ran %d times, want once", n)
	}
	rn.trigger("quiet", 0)
	waitFor(t, "the triggered pass", func() bool { return l.count("quiet") == 2 })

	blocked.Store(true)
	rn.trigger("slow", 0)
	<-inPass
	blocked.Store(false)
	rn.trigger("slow", 0) // during the pass
	close(release)
	waitFor(t, "the pass after the trigger during a pass", func() bool { return l.count("slow") == 3 })
	time.Sleep(50 * time.Millisecond)
	if n := l.count("slow"); n != 3 {
		t.Errorf("slow ran %d times, want 3 (start, trigger, trigger during the pass)", n)
	}
	rn.trigger("no such reconciler", 0) // a reconciler the config left out
}

// TestRunnerBackoff: a failing pass is retried after a doubling wait
// (retryMin, 2x, 4x, capped at retryMax), its status names the error and
// since when; a trigger cuts the wait short; a success clears the error.
func TestRunnerBackoff(t *testing.T) {
	var l passLog
	var failing atomic.Bool
	failing.Store(true)
	rn := newRunner()
	rn.retryMin, rn.retryMax = 40*time.Millisecond, 160*time.Millisecond
	rn.add(&reconciler{name: "flaky", do: l.do("flaky", func(n int) error {
		if failing.Load() {
			return errors.New("the kernel said no")
		}
		return nil
	})})
	startRunner(t, rn, nil)
	waitFor(t, "five failed passes", func() bool { return l.count("flaky") >= 5 })
	ts := l.times("flaky")
	want := []time.Duration{40, 80, 160, 160}
	for i, w := range want {
		gap := ts[i+1].Sub(ts[i])
		if w *= time.Millisecond; gap < w || gap > w+100*time.Millisecond {
			t.Errorf("retry %d after %v, want %v", i+1, gap, w)
		}
	}
	st := rn.statuses()[0]
	if st.LastError != "the kernel said no" || st.Failures < 5 || st.ErrorSince.IsZero() || !st.LastSuccess.IsZero() {
		t.Errorf("failing status %+v", st)
	}
	since := st.ErrorSince

	// A trigger during the wait: the next pass at once, not after 160 ms.
	n := l.count("flaky")
	before := time.Now()
	rn.trigger("flaky", 0)
	waitFor(t, "the triggered retry", func() bool { return l.count("flaky") > n })
	if took := time.Since(before); took > 100*time.Millisecond {
		t.Errorf("the triggered retry came after %v", took)
	}
	if st := rn.statuses()[0]; !st.ErrorSince.Equal(since) {
		t.Errorf("the same error moved its start from %v to %v", since, st.ErrorSince)
	}

	failing.Store(false)
	waitFor(t, "a good pass", func() bool { return rn.statuses()[0].LastError == "" })
	st = rn.statuses()[0]
	if st.LastSuccess.IsZero() || !st.ErrorSince.IsZero() || !st.Due.IsZero() {
		t.Errorf("status after the good pass %+v: want a success, no error, not due (no backstop)", st)
	}
	n = l.count("flaky")
	time.Sleep(250 * time.Millisecond)
	if got := l.count("flaky"); got != n {
		t.Errorf("%d passes after the good one, want none (no backstop, no trigger)", got-n)
	}
}

// TestRunnerSkipAndSerial: while skip holds, no pass runs (an agent
// superseded on the node changes nothing); passes never overlap.
func TestRunnerSkipAndSerial(t *testing.T) {
	var skip atomic.Bool
	skip.Store(true)
	var running, overlaps, passes atomic.Int32
	do := func(context.Context) error {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		passes.Add(1)
		return nil
	}
	rn := newRunner()
	for _, name := range []string{"a", "b", "c"} {
		rn.add(&reconciler{name: name, do: do, every: 5 * time.Millisecond})
	}
	startRunner(t, rn, skip.Load)
	time.Sleep(50 * time.Millisecond)
	if n := passes.Load(); n != 0 {
		t.Fatalf("%d passes while held back", n)
	}
	skip.Store(false)
	waitFor(t, "passes", func() bool { return passes.Load() >= 30 })
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d passes overlapped another", n)
	}
}

// TestRunnerWaitPass: waitPass returns once a pass has run after the call
// (a scrape's fresh figures), and when its context ends if none can.
func TestRunnerWaitPass(t *testing.T) {
	var l passLog
	rn := newRunner()
	rn.add(&reconciler{name: "metrics", do: l.do("metrics", nil)})
	startRunner(t, rn, nil)
	waitFor(t, "the first pass", func() bool { return l.count("metrics") == 1 })
	rn.waitPass(context.Background(), "metrics")
	if n := l.count("metrics"); n != 2 {
		t.Errorf("waitPass returned after %d passes, want 2", n)
	}
	held := newRunner() // never run
	held.add(&reconciler{name: "metrics", do: l.do("held", nil)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	held.waitPass(ctx, "metrics")
	if ctx.Err() == nil {
		t.Error("waitPass returned before a pass or the context's end")
	}
}

// TestRunnerStuck: /healthz's view: a pass running longer than the limit
// is named.
func TestRunnerStuck(t *testing.T) {
	rn := newRunner()
	release := make(chan struct{})
	rn.add(&reconciler{name: "hung", do: func(context.Context) error { <-release; return nil }})
	startRunner(t, rn, nil)
	defer close(release)
	waitFor(t, "the pass to hang", func() bool { name, _ := rn.stuck(10 * time.Millisecond); return name == "hung" })
	if name, _ := rn.stuck(time.Hour); name != "" {
		t.Errorf("stuck(1h) = %q", name)
	}
}

// TestRunnerMinGap: a reconciler with a minGap runs at once on a trigger
// after a quiet spell, and at most once per minGap under a flood of
// triggers (a Node's annotation rewritten in a loop).
func TestRunnerMinGap(t *testing.T) {
	var l passLog
	rn := newRunner()
	rn.add(&reconciler{name: "nodes", do: l.do("nodes", nil), minGap: 100 * time.Millisecond})
	startRunner(t, rn, nil)
	waitFor(t, "the first pass", func() bool { return l.count("nodes") == 1 })
	time.Sleep(150 * time.Millisecond)
	before := time.Now()
	rn.trigger("nodes", 0)
	waitFor(t, "the pass after a quiet spell", func() bool { return l.count("nodes") == 2 })
	if took := time.Since(before); took > 50*time.Millisecond {
		t.Errorf("a trigger after a quiet spell ran after %v", took)
	}
	for end := time.Now().Add(450 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		rn.trigger("nodes", 0)
	}
	if n := l.count("nodes") - 2; n < 3 || n > 5 {
		t.Errorf("%d passes under 450 ms of triggers with a 100 ms gap, want 4 or so", n)
	}
	ts := l.times("nodes")
	for i := 2; i < len(ts); i++ {
		if gap := ts[i].Sub(ts[i-1]); gap < 95*time.Millisecond {
			t.Errorf("pass %d only %v after the one before", i, gap)
		}
	}
}

// TestRunnerWaitPassHeldBack: a scrape of a superseded agent (every pass
// held back) does not wait for its context's end.
func TestRunnerWaitPassHeldBack(t *testing.T) {
	rn := newRunner()
	rn.add(&reconciler{name: "metrics", do: func(context.Context) error { return nil }})
	startRunner(t, rn, func() bool { return true })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rn.waitPass(ctx, "metrics")
	if ctx.Err() != nil {
		t.Error("waitPass waited for its context's end while every pass was held back")
	}
}
