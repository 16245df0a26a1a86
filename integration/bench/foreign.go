package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// foreignStats compare a clean node with one holding another owner's
// ruleset, per op: the podwire chain (E), ptp + host-local alone (A) and
// podwire run directly.
type foreignStats struct {
	shape                     foreignShape
	load                      time.Duration // nft -f of the ruleset
	loadErr                   string
	cleanA, cleanE, cleanPW   opStats
	foreignA, foreignE, forPW opStats
}

// foreign measures ADD and DEL on two nodes, interleaved round-robin: a
// clean one, and one whose nftables hold a kube-proxy-shaped ruleset of
// another owner (kubeProxyRuleset), loaded with `nft -f` inside that node's
// netns. podwire must not read that ruleset (issue 12: reads bounded by
// podwire's own tables).
func (b *bench) foreign() error {
	fs := &foreignStats{shape: b.opt.foreign}
	b.r.foreign = fs
	clean, err := b.newNode("clean")
	if err != nil {
		return err
	}
	busy, err := b.newNode("foreign")
	if err != nil {
		return err
	}
	path := filepath.Join(b.workDir, "kube-proxy.nft")
	if err := os.WriteFile(path, []byte(kubeProxyRuleset(fs.shape)), 0o600); err != nil {
		return err
	}
	err = busy.ns.Do(func(ns.NetNS) error {
		t0 := time.Now()
		out, err := exec.Command("nft", "-f", path).CombinedOutput()
		fs.load = time.Since(t0)
		if err != nil {
			return fmt.Errorf("nft -f %s in the foreign node: %v: %s", path, err, firstLine(string(out)))
		}
		return nil
	})
	if err != nil {
		return err
	}
	type side struct {
		n       *node
		a, e    *arm
		A, E, W *opStats
	}
	var sides []*side
	for i, s := range []struct {
		n       *node
		A, E, W *opStats
	}{{clean, &fs.cleanA, &fs.cleanE, &fs.cleanPW}, {busy, &fs.foreignA, &fs.foreignE, &fs.forPW}} {
		a, err := newArmNamed("A", s.n, 60+i, "bench-E")
		if err != nil {
			return err
		}
		e, err := newArm("E", s.n, 60+i)
		if err != nil {
			return err
		}
		sides = append(sides, &side{n: s.n, a: a, e: e, A: s.A, E: s.E, W: s.W})
	}
	cniPath := strings.Join(b.binDirs, ":")
	ops := []string{"A", "E", "direct"}
	seq := 200000
	for r := -b.opt.warmup; r < b.opt.rounds; r++ {
		if err := checkInterrupted(); err != nil {
			return err
		}
		for _, s := range rotate(sides, r) {
			for _, op := range rotate(ops, r) {
				seq++
				var add, del cost
				var err error
				var st *opStats
				switch op {
				case "A":
					add, del, err = s.n.addDel(s.a, seq)
					st = s.A
				case "E":
					add, del, err = s.n.addDel(s.e, seq)
					st = s.E
				case "direct":
					add, del, err = s.n.directPodwire(b, s.a, seq, cniPath, nil)
					st = s.W
				}
				if err != nil {
					return fmt.Errorf("%s on %s: %w", op, s.n.name, err)
				}
				if r >= 0 {
					st.put(add, del)
				}
			}
		}
	}
	// The other owner's ruleset goes with its node: close it now rather
	// than carry 100000 rules through the later phases.
	busy.close()
	return nil
}
