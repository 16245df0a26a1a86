package vm

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/internal/testns"
)

// BenchmarkVLANAttachment times ADD and DEL of a VLAN attachment (ptp +
// podwire, podwire.io/vlan with a static address: bridge port, PVID, uplink
// trunk, port check elements, the kernel's announcement) against an
// ordinary pod (ptp + podwire, source check only) on the same node, in one
// VM run, interleaved: each round runs both arms, starting with the other
// arm each time. Under QEMU's TCG every absolute time is the emulator's, so
// what it reports is the ratio VLAN / ordinary of the p50s.
//
// `make bench` runs it through scripts/vm-test.sh (PODWIRE_VM_BENCH) with
// a fixed round count (-test.benchtime=Nx) and reads the
// PODWIRE-VLAN-BENCH line it prints.
func BenchmarkVLANAttachment(b *testing.B) {
	require(b, capVLANFiltering, capVLAN8021Q)
	n := newNode(b, vlanConf(map[string]any{"sourceCheck": true}))
	addUplink(b, n, "uplink0")
	list, err := n.Chain("1.1.0", n.podwire).List()
	if err != nil {
		b.Fatal(err)
	}
	type arm struct {
		name     string
		ann      func(i int) map[string]string
		add, del []time.Duration
	}
	arms := []*arm{
		{name: "ordinary", ann: func(int) map[string]string { return nil }},
		{name: "vlan", ann: func(i int) map[string]string {
			return map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": fmt.Sprintf("192.0.2.%d/24", 1+i%250)}
		}},
	}
	// once is one ADD then DEL of arm a's pod i; keep records the times.
	once := func(a *arm, i int, keep bool) {
		podNS, err := cnitest.NewPodNS()
		if err != nil {
			b.Fatal(err)
		}
		defer testns.Release(podNS)
		rt := cnitest.PodArgs{Annotations: a.ann(i)}.RuntimeConf(podNS.Path())
		c := n.Client()
		t0 := time.Now()
		if _, err := c.Add(list, rt); err != nil {
			_ = c.Del(list, rt)
			b.Fatalf("%s ADD: %v\nlog:\n%s", a.name, err, n.Log())
		}
		t1 := time.Now()
		if err := c.Del(list, rt); err != nil {
			b.Fatalf("%s DEL: %v\nlog:\n%s", a.name, err, n.Log())
		}
		if keep {
			a.add, a.del = append(a.add, t1.Sub(t0)), append(a.del, time.Since(t1))
		}
	}
	// Warm-up, not measured: the first ADD lays down the node tables and
	// the first VLAN ADD the bridge and its port check.
	for i := 0; i < 2; i++ {
		for _, a := range arms {
			once(a, i, false)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		first := i % 2
		once(arms[first], i, true)
		once(arms[1-first], i, true)
	}
	b.StopTimer()
	if left := n.leftovers(); len(left) > 0 {
		b.Fatalf("the benchmark's DELs left %v", left)
	}
	o, v := arms[0], arms[1]
	b.ReportMetric(p50ms(v.add)/p50ms(o.add), "vlan/ordinary-add")
	b.ReportMetric(p50ms(v.del)/p50ms(o.del), "vlan/ordinary-del")
	fmt.Printf("PODWIRE-VLAN-BENCH rounds=%d ordinary_add_p50_ms=%.1f vlan_add_p50_ms=%.1f add_ratio=%.2f ordinary_del_p50_ms=%.1f vlan_del_p50_ms=%.1f del_ratio=%.2f\n",
		b.N, p50ms(o.add), p50ms(v.add), p50ms(v.add)/p50ms(o.add), p50ms(o.del), p50ms(v.del), p50ms(v.del)/p50ms(o.del))
}

// p50ms is the median of d in milliseconds.
func p50ms(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}
