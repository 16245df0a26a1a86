package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// stepClock is a passiveClock that moves only when told.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *stepClock) step(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// writes counts the Event creates and patches the clientset received.
func writes(cs *fake.Clientset) (creates, patches int) {
	for _, a := range cs.Actions() {
		if a.GetResource().Resource != "events" {
			continue
		}
		switch a.GetVerb() {
		case "create":
			creates++
		case "patch":
			patches++
		}
	}
	return creates, patches
}

// drain waits until the recorder has handed every Event recorded so far to
// the clientset: it records one more on another object and waits for its
// create (the broadcaster writes to the sink in order, on one goroutine).
func drain(t *testing.T, cs *fake.Clientset, e *events, i int) {
	t.Helper()
	name := fmt.Sprintf("sentinel-%d", i)
	e.onPod("default", name, name, corev1.EventTypeNormal, "Sentinel", name)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, a := range cs.Actions() {
			if c, ok := a.(k8stesting.CreateAction); ok {
				if ev, ok := c.GetObject().(*corev1.Event); ok && ev.InvolvedObject.Name == name {
					return
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the recorder did not write %s within 10 s", name)
}

// createPerRepair is how the agent recorded a Node Event before the
// recorder: one Create per call, never aggregated nor rate-limited.
func createPerRepair(cs *fake.Clientset, node, reason, msg string, now time.Time) error {
	t := metav1.NewTime(now)
	_, err := cs.CoreV1().Events(metav1.NamespaceDefault).Create(context.Background(), &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", node, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node, UID: "uid-1"},
		Reason:         reason, Message: msg, Type: corev1.EventTypeNormal,
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
	}, metav1.CreateOptions{})
	return err
}

// TestNodeEventsRateLimited floods the Node with the Event of one cause, as
// an owner flushing the ruleset every 600 ms would (100 repairs in a
// minute, then a second minute of them), and counts the Events written:
// the old path creates one per repair, the recorder one per minute per
// cause. Repairs of differing messages are aggregated by the correlator.
func TestNodeEventsRateLimited(t *testing.T) {
	const flushed = "podwire's nftables tables were missing or had drifted, and were repaired: rebuilt [inet podwire], deleted [], elements re-added map[] (wanted [inet podwire])"
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	t.Run("control: one Create per repair", func(t *testing.T) {
		cs := fake.NewSimpleClientset()
		now := start
		for range 100 {
			if err := createPerRepair(cs, "worker-1", ReasonTablesRepaired, flushed, now); err != nil {
				t.Fatal(err)
			}
			now = now.Add(600 * time.Millisecond)
		}
		if c, _ := writes(cs); c != 100 {
			t.Fatalf("old path: %d creates for 100 repairs, want 100", c)
		}
	})

	cases := []struct {
		name string
		// msg is the message of the i-th repair.
		msg func(i int) string
		// maxCreates and maxWrites (creates + patches) bound each minute;
		// a repeat after the first minute patches the Event's count.
		maxCreates, maxWrites int
	}{
		{"one cause", func(int) string { return flushed }, 1, 1},
		// Each message is a cause of its own; ten similar Events (one
		// reason) become one aggregated Event, patched from then on:
		// creates stay bounded, each cause is written once.
		{"differing messages", func(i int) string { return fmt.Sprintf("%s (%d)", flushed, i) }, 10, 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewSimpleClientset()
			clk := &stepClock{t: start}
			e := newEvents(cs.CoreV1(), "worker-1", clk)
			defer e.stop()
			creates, total := 0, 0
			for minute := range 2 {
				for i := range 100 {
					e.onNode("uid-1", corev1.EventTypeNormal, ReasonTablesRepaired, tc.msg(minute*100+i))
					clk.step(600 * time.Millisecond)
				}
				drain(t, cs, e, minute)
				c, p := writes(cs)
				c-- // the sentinel
				newCreates, newWrites := c-creates, c+p-total
				creates, total = c, c+p
				t.Logf("minute %d: %d creates, %d patches of Node Events for 100 repairs", minute+1, newCreates, newWrites-newCreates)
				if newWrites < 1 || newCreates > tc.maxCreates || newWrites > tc.maxWrites {
					t.Errorf("minute %d: %d creates and %d writes for 100 repairs, want at most %d creates and 1..%d writes",
						minute+1, newCreates, newWrites, tc.maxCreates, tc.maxWrites)
				}
				// The sentinel is the only Pod Event; leave it out of
				// the next minute's count.
				creates++
				total++
			}
		})
	}
}
