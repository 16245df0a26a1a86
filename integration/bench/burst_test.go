package bench

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/internal/testns"
)

// burstSize is a node's share of a Deployment scaled up at once; each ADD
// starts without waiting for the others, as a kubelet's pod workers do.
const burstSize = 48

// BenchmarkBurst makes burstSize pods at once on a node per arm (A, B, E),
// then deletes them at once: "<arm>-burst-add-ms" is the wall time from the
// first ADD's start to the last one's end, "-cpu-ms" every plugin process's
// CPU time. Pod netns are made and removed off the clock.
func BenchmarkBurst(b *testing.B) {
	var arms []*arm
	for i, k := range []string{"A", "B", "E"} {
		arms = append(arms, newArm(b, k, newNode(b, "burst-"+k), 160+i, "bench-burst-"+k))
	}
	seq := 200000
	rounds(b, len(arms), func(r, i int, s samples) error {
		a := arms[i]
		var pods []*pod
		defer func() {
			for _, p := range pods {
				testns.Release(p.NS)
			}
		}()
		for range burstSize {
			seq++
			p, err := newPod(a, seq)
			if err != nil {
				return err
			}
			pods = append(pods, p)
		}
		add, err := timed(unix.RUSAGE_CHILDREN, func() error {
			return each(pods, func(p *pod) (err error) { p.Result, p.Version, err = a.n.Attach(a.list, p.RT); return err })
		})
		if err != nil {
			return fmt.Errorf("burst of arm %s, ADD: %w", a.key, err)
		}
		del, err := timed(unix.RUSAGE_CHILDREN, func() error {
			return each(pods, func(p *pod) error { return a.n.Del(a.list, p.RT) })
		})
		if err != nil {
			return fmt.Errorf("burst of arm %s, DEL: %w", a.key, err)
		}
		s.put(a.key+"-burst-add", add)
		s.put(a.key+"-burst-del", del)
		return nil
	})
}

// each runs f for every pod at once and waits for all of them.
func each(pods []*pod, f func(*pod) error) error {
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for j, p := range pods {
		wg.Go(func() { errs[j] = f(p) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
