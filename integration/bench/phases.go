package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// opStats are the ADD and DEL latencies of one arm, and the CPU time of
// the plugin processes.
type opStats struct {
	add, del       samples
	addCPU, delCPU samples
}

func (s *opStats) put(add, del cost) {
	s.add, s.del = append(s.add, add.wall), append(s.del, del.wall)
	s.addCPU, s.delCPU = append(s.addCPU, add.cpu), append(s.delCPU, del.cpu)
}

// latency compares the arms A..G, each on a node of its own, round-robin:
// every round makes one pod per arm (ADD then DEL), starting from a
// different arm each round.
func (b *bench) latency() error {
	var arms []*arm
	for i, k := range armKinds {
		if k == "G" && !b.r.vlanOK {
			continue
		}
		n, err := b.newNode("lat-" + k)
		if err != nil {
			return err
		}
		a, err := newArm(k, n, 100+i)
		if err != nil {
			return err
		}
		arms = append(arms, a)
	}
	b.r.arms = arms
	b.r.lat = map[string]*opStats{}
	for _, a := range arms {
		b.r.lat[a.key] = &opStats{}
	}
	for r := -b.opt.warmup; r < b.opt.rounds; r++ {
		if err := checkInterrupted(); err != nil {
			return err
		}
		for _, a := range rotate(arms, r) {
			add, del, err := a.node.addDel(a, r+b.opt.warmup)
			if err != nil {
				return err
			}
			if r >= 0 {
				b.r.lat[a.key].put(add, del)
			}
		}
	}
	for _, a := range arms {
		if a.key == "E" {
			ts, err := a.node.podwireTables()
			if err != nil {
				return err
			}
			b.r.tablesE = ts
		}
	}
	return nil
}

// directStats are the plugin-alone figures of one binary.
type directStats struct {
	opStats
	faultsAdd, faultsDel []int64 // minor page faults per run
}

// direct runs podwire and the passthrough floor themselves (no libcni, no
// ptp in the timing), round-robin, on pods made by ptp: wall time of the
// process, its CPU time and its minor page faults (wait4's rusage).
func (b *bench) direct() error {
	n, err := b.newNode("direct")
	if err != nil {
		return err
	}
	a, err := newArm("A", n, 150)
	if err != nil {
		return err
	}
	plugins := []struct {
		name, bin string
		entry     map[string]any
	}{
		{"podwire", b.podwireBin, podwireEntry(n, nil)},
		{"passthrough", filepath.Join(b.benchBin, "passthrough"), map[string]any{"type": "passthrough"}},
		{"tuning", filepath.Join(b.cniBin, "tuning"), map[string]any{"type": "tuning", "sysctl": map[string]string{"net.core.somaxconn": "1024"}}},
	}
	if b.opt.compare != "" {
		plugins = append(plugins, struct {
			name, bin string
			entry     map[string]any
		}{"podwire (-compare " + b.opt.compare + ")", b.opt.compare, podwireEntry(n, nil)})
	}
	b.r.direct = map[string]*directStats{}
	for _, p := range plugins {
		b.r.directOrder = append(b.r.directOrder, p.name)
		b.r.direct[p.name] = &directStats{}
	}
	cniPath := strings.Join(b.binDirs, ":")
	for r := -b.opt.warmup; r < b.opt.rounds; r++ {
		if err := checkInterrupted(); err != nil {
			return err
		}
		for _, pl := range rotate(plugins, r) {
			p, err := newPod(a, r)
			if err != nil {
				return err
			}
			if _, err := n.add(p); err != nil {
				p.closeNS()
				return err
			}
			ai, err := n.execPlugin(pl.bin, "ADD", p, pl.entry, cniPath, nil)
			if err != nil {
				p.closeNS()
				return err
			}
			di, err := n.execPlugin(pl.bin, "DEL", p, pl.entry, cniPath, nil)
			if err != nil {
				p.closeNS()
				return err
			}
			if _, err := n.del(p); err != nil {
				p.closeNS()
				return err
			}
			p.closeNS()
			if r >= 0 {
				s := b.r.direct[pl.name]
				s.put(cost{ai.dur, ai.cpu}, cost{di.dur, di.cpu})
				s.faultsAdd, s.faultsDel = append(s.faultsAdd, ai.faults), append(s.faultsDel, di.faults)
			}
		}
	}
	return nil
}

// levelStats are one scaling level's figures.
type levelStats struct {
	existing  int
	a         opStats // ptp + host-local alone, on the same node
	e         opStats // the podwire chain, steady state
	first     opStats // the podwire chain, tables deleted before ADD
	pw        opStats // podwire run directly, steady state
	firstPW   opStats // podwire run directly, tables deleted before ADD
	dumps     *dumpCosts
	straceAdd string
	straceDel string
}

// scaling builds one node per level with that many existing podwire pods
// (made through the real chain) and measures, round-robin over the nodes:
// ptp alone, the podwire chain, the podwire chain after its tables were
// deleted (first invocation), and podwire run directly, steady and first.
func (b *bench) scaling() error {
	type lvl struct {
		n     *node
		a, e  *arm
		stats *levelStats
	}
	var lv []*lvl
	for i, l := range b.opt.levels {
		n, err := b.newNode(fmt.Sprintf("scale-%d", l))
		if err != nil {
			return err
		}
		// A shares E's network name and pool: host-local's cost grows
		// with the leases of the network, and that is not podwire's.
		a, err := newArmNamed("A", n, 70+i, "bench-E")
		if err != nil {
			return err
		}
		e, err := newArm("E", n, 70+i)
		if err != nil {
			return err
		}
		lv = append(lv, &lvl{n: n, a: a, e: e, stats: &levelStats{existing: l}})
	}
	// Existing pods, through the chain; the ADD latency of the biggest
	// level as it grows is a figure of its own.
	for _, l := range lv {
		t0 := time.Now()
		var curve samples
		if b.opt.synthetic && l.stats.existing > 1 {
			if err := l.n.syntheticPods(l.e, l.stats.existing); err != nil {
				return err
			}
			continue
		}
		for i := 0; i < l.stats.existing; i++ {
			if err := checkInterrupted(); err != nil {
				return err
			}
			d, _, err := l.n.keep(l.e, i)
			if err != nil {
				return fmt.Errorf("existing pod %d on %s: %w", i, l.n.name, err)
			}
			curve = append(curve, d.wall)
			if (i+1)%250 == 0 {
				b.progress("%s: %d existing pods", l.n.name, i+1)
			}
		}
		if l.stats.existing > 0 {
			b.progress("%s: %d existing pods in %s", l.n.name, l.stats.existing, time.Since(t0).Round(time.Second))
		}
		if len(curve) >= len(b.r.growth) {
			b.r.growth = curve
		}
	}
	cniPath := strings.Join(b.binDirs, ":")
	ops := []string{"A", "E", "first", "direct", "first-direct"}
	seq := 100000
	for r := -b.opt.warmup; r < b.opt.rounds; r++ {
		if err := checkInterrupted(); err != nil {
			return err
		}
		for _, l := range rotate(lv, r) {
			for _, op := range rotate(ops, r) {
				seq++
				var add, del cost
				var err error
				switch op {
				case "A":
					add, del, err = l.n.addDel(l.a, seq)
				case "E":
					add, del, err = l.n.addDel(l.e, seq)
				case "first":
					if err = l.n.deletePodwireTables(); err == nil {
						add, del, err = l.n.addDel(l.e, seq)
					}
				case "direct":
					add, del, err = l.n.directPodwire(b, l.a, seq, cniPath, nil)
				case "first-direct":
					if err = l.n.deletePodwireTables(); err == nil {
						add, del, err = l.n.directPodwire(b, l.a, seq, cniPath, nil)
					}
				}
				if err != nil {
					return err
				}
				if r < 0 {
					continue
				}
				s := l.stats
				switch op {
				case "A":
					s.a.put(add, del)
				case "E":
					s.e.put(add, del)
				case "first":
					s.first.put(add, del)
				case "direct":
					s.pw.put(add, del)
				case "first-direct":
					s.firstPW.put(add, del)
				}
			}
		}
	}
	for _, l := range lv {
		var err error
		if l.stats.dumps, err = l.n.probeDumps(); err != nil {
			return err
		}
		if b.opt.strace {
			if err := l.n.stracePodwire(b, l.a, l.stats, cniPath); err != nil {
				return err
			}
		}
		b.r.levels = append(b.r.levels, l.stats)
	}
	b.r.scaleNodes = nil
	for _, l := range lv {
		b.r.scaleNodes = append(b.r.scaleNodes, l.n)
	}
	return nil
}

// directPodwire makes a pod with ptp (untimed) and times podwire's ADD and
// DEL run directly with ptp's result as prevResult.
func (n *node) directPodwire(b *bench, a *arm, seq int, cniPath string, wrap []string) (add, del cost, err error) {
	ai, di, err := n.directPodwireInv(b, a, seq, cniPath, wrap)
	if err != nil {
		return add, del, err
	}
	return cost{ai.dur, ai.cpu}, cost{di.dur, di.cpu}, nil
}

func (n *node) directPodwireInv(b *bench, a *arm, seq int, cniPath string, wrap []string) (ai, di *invocation, err error) {
	p, err := newPod(a, seq)
	if err != nil {
		return nil, nil, err
	}
	defer p.closeNS()
	if _, err := n.add(p); err != nil {
		return nil, nil, err
	}
	entry := podwireEntry(n, nil)
	if ai, err = n.execPlugin(b.podwireBin, "ADD", p, entry, cniPath, wrap); err == nil {
		di, err = n.execPlugin(b.podwireBin, "DEL", p, entry, cniPath, wrap)
	}
	if _, derr := n.del(p); err == nil {
		err = derr
	}
	return ai, di, err
}

// stracePodwire runs one podwire ADD and DEL under strace -c -f and keeps
// the syscall summaries.
func (n *node) stracePodwire(b *bench, a *arm, s *levelStats, cniPath string) error {
	dir, err := os.MkdirTemp(b.workDir, "strace-")
	if err != nil {
		return err
	}
	p, err := newPod(a, 999999)
	if err != nil {
		return err
	}
	defer p.closeNS()
	if _, err := n.add(p); err != nil {
		return err
	}
	entry := podwireEntry(n, nil)
	for _, verb := range []string{"ADD", "DEL"} {
		out := filepath.Join(dir, verb)
		if _, err := n.execPlugin(b.podwireBin, verb, p, entry, cniPath, []string{"strace", "-f", "-c", "-S", "calls", "-o", out}); err != nil {
			return err
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return err
		}
		if verb == "ADD" {
			s.straceAdd = string(data)
		} else {
			s.straceDel = string(data)
		}
	}
	if b.opt.profWrap != "" {
		q, err := newPod(a, 999997)
		if err != nil {
			return err
		}
		defer q.closeNS()
		if _, err := n.add(q); err != nil {
			return err
		}
		wrap := func(verb string) []string {
			return strings.Fields(strings.NewReplacer("%d", fmt.Sprint(s.existing), "%v", verb).Replace(b.opt.profWrap))
		}
		if b.opt.profFirst {
			// A first invocation: the tables rebuilt, every pod's elements re-added.
			if err := n.deletePodwireTables(); err != nil {
				return err
			}
		}
		if _, err := n.execPlugin(b.podwireBin, "ADD", q, entry, cniPath, wrap("ADD")); err != nil {
			return err
		}
		var delWrap []string
		if strings.Contains(b.opt.profWrap, "%v") {
			delWrap = wrap("DEL")
		}
		if _, err := n.execPlugin(b.podwireBin, "DEL", q, entry, cniPath, delWrap); err != nil {
			return err
		}
		if _, err := n.del(q); err != nil {
			return err
		}
	}
	if b.opt.traceDir != "" {
		// A second pod: the timeline of a steady-state ADD and its DEL.
		q, err := newPod(a, 999998)
		if err != nil {
			return err
		}
		defer q.closeNS()
		if _, err := n.add(q); err != nil {
			return err
		}
		for _, verb := range []string{"ADD", "DEL"} {
			out := filepath.Join(b.opt.traceDir, fmt.Sprintf("%d-%s.strace", s.existing, verb))
			if _, err := n.execPlugin(b.podwireBin, verb, q, entry, cniPath, []string{"strace", "-f", "-tt", "-T", "-o", out}); err != nil {
				return err
			}
		}
		if _, err := n.del(q); err != nil {
			return err
		}
	}
	_, err = n.del(p)
	return err
}

// ppsArm is one arm of the throughput comparison.
type ppsArm struct {
	label   string
	pods    int // podwire pods on the node
	checked bool
	s, r    *pod
	rx, tx  []float64
}

// throughput streams UDP between two pods through the node, round-robin
// over the smallest and the biggest scaling node and, on each, two pods of
// the podwire chain (checked) and two pods of ptp alone (their host
// interfaces are not in the checked set: one lookup): so the cost of the
// check at 1000 pods is told apart from that of a node with 1000 pods.
func (b *bench) throughput() error {
	var arms []*ppsArm
	sn := b.r.scaleNodes
	if len(sn) == 0 {
		return nil
	}
	idx := []int{0}
	if len(sn) > 1 {
		idx = append(idx, len(sn)-1)
	}
	// Per primary, on the smallest and the biggest scaling node, two pods
	// not checked and two checked: ptp (A, E) and the bridge plugin on cni0
	// (H, I; with as many other pods' elements in bridge podwire as the
	// biggest node has pods).
	pairs := []struct {
		unchecked, checked string
		labels             [2]string
		subnet, seq        int
		network            string
	}{
		{"A", "E", [2]string{"ptp pods (not checked)", "podwire pods (source check)"}, 70, 900001, "bench-E"},
		{"H", "I", [2]string{"bridge pods (not checked)", "podwire pods on a bridge (checked at the bridge)"}, 80, 900003, "bench-I"},
	}
	for _, pr := range pairs {
		for j, i := range idx {
			n := sn[i]
			for k, kind := range []string{pr.unchecked, pr.checked} {
				a, err := newArmNamed(kind, n, pr.subnet+i, pr.network)
				if err != nil {
					return err
				}
				_, s, err := n.keep(a, pr.seq)
				if err != nil {
					return err
				}
				_, r, err := n.keep(a, pr.seq+1)
				if err != nil {
					return err
				}
				arms = append(arms, &ppsArm{label: pr.labels[k], pods: b.opt.levels[i] + 2, checked: k == 1, s: s, r: r})
			}
			if pr.checked == "I" && j == len(idx)-1 && b.opt.levels[i] > 0 {
				if err := n.fakeBridgedPods(b.opt.levels[i]); err != nil {
					return fmt.Errorf("bridged elements on %s: %w", n.name, err)
				}
			}
		}
	}
	d := time.Duration(b.opt.ppsSeconds * float64(time.Second))
	for r := 0; r < b.opt.ppsBursts; r++ {
		if err := checkInterrupted(); err != nil {
			return err
		}
		for _, a := range rotate(arms, r) {
			rx, tx, err := blast(a.s, a.r, d)
			if err != nil {
				return fmt.Errorf("%s (%d pods): %w", a.label, a.pods, err)
			}
			a.rx, a.tx = append(a.rx, rx), append(a.tx, tx)
		}
	}
	b.r.pps = arms
	return nil
}
