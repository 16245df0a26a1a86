package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
)

// BenchmarkNodeScale measures every verb and the repairs on one node per
// BENCH_NODE_PODS entry (default 10,250,1000: a node's usual maxPods is
// 110 to 250), its existing pods made through arm E. Per round and level,
// in a rotated order: ADD and DEL of one more pod ("add", "del"), the same
// with podwire run directly on a pod of ptp + host-local ("alone-add",
// "alone-del": podwire's own cost, without host-local's, which grows with
// its leases; under BENCH_WRAP in the unmeasured round), CHECK of
// an existing pod ("check"), GC with every existing attachment valid
// ("gc", nothing to remove), STATUS ("status"), all through libcni with
// ptp + host-local + podwire, and `podwire repair` run directly with the
// tables whole ("repair") and after every podwire table was deleted
// ("rebuild": every record's elements re-added; both under BENCH_WRAP in
// the unmeasured round), as "<op>@<pods>-ms".
// Then, once per level, the node agent (agentproc) on the node: its RSS
// 10 s after it is Ready ("agent-rss-MiB@<pods>") and, three times, the
// time from `nft flush ruleset` to podwire's tables whole again
// ("agent-repair-ms@<pods>", the median).
func BenchmarkNodeScale(b *testing.B) {
	var lv []*level
	for i, pods := range envInts(b, "BENCH_NODE_PODS", "10,250,1000") {
		lv = append(lv, levelNode(b, i, pods))
	}
	ops := []string{"add", "alone", "check", "gc", "status", "repair", "rebuild"}
	seq := 200000
	rounds(b, len(lv), func(r, i int, s samples) error {
		l := lv[i]
		conflist, err := writeConflist(l)
		if err != nil {
			return err
		}
		for k := range ops {
			op := ops[(k+r+len(ops))%len(ops)]
			var c cost
			switch op {
			case "add":
				seq++
				add, del, err := l.n.addDel(l.e, seq)
				if err != nil {
					return err
				}
				s.put("add@"+l.name, add)
				s.put("del@"+l.name, del)
				continue
			case "alone":
				seq++
				wrap := ""
				if r < 0 { // profile the unmeasured round only
					wrap = strings.NewReplacer("%d", l.name, "%o", op).Replace(os.Getenv("BENCH_WRAP"))
				}
				add, del, err := l.n.alone(cnitest.PodwireBin(), l.a, seq, podwireEntry(l.n, nil), wrap)
				if err != nil {
					return err
				}
				s.put("alone-add@"+l.name, add)
				s.put("alone-del@"+l.name, del)
				continue
			case "check":
				p := l.n.pods[(r+len(l.n.pods))%len(l.n.pods)]
				c, err = timed(unix.RUSAGE_CHILDREN, func() error { return l.n.Check(l.e.list, p.RT) })
			case "gc":
				valid := make([]*libcni.RuntimeConf, len(l.n.pods))
				for j, p := range l.n.pods {
					valid[j] = p.RT
				}
				c, err = timed(unix.RUSAGE_CHILDREN, func() error { return l.n.GC(l.e.list, valid...) })
			case "status":
				c, err = timed(unix.RUSAGE_CHILDREN, func() error { return l.n.Status(l.e.list) })
			case "repair", "rebuild":
				if op == "rebuild" {
					err = withConn(l.n.NS, func(c nft.Conn) error { _, err := nodetables.RemoveAll(c); return err })
					if err != nil {
						return err
					}
				}
				argv := []string{cnitest.PodwireBin(), "repair", "--conflist", conflist}
				if r < 0 { // profile the unmeasured round only
					wrap := strings.NewReplacer("%d", l.name, "%o", op, "%v", "REPAIR").Replace(os.Getenv("BENCH_WRAP"))
					argv = append(strings.Fields(wrap), argv...)
				}
				c, err = l.n.run(exec.Command(argv[0], argv[1:]...), nil)
			}
			if err != nil {
				return fmt.Errorf("%s at %d pods: %w", op, l.pods, err)
			}
			s.put(op+"@"+l.name, c)
		}
		return nil
	})
	for _, l := range lv {
		check(b)
		rss, repair := agentAt(b, l)
		b.ReportMetric(float64(rss)/(1<<20), "agent-rss-MiB@"+l.name)
		b.ReportMetric(repair, "agent-repair-ms@"+l.name)
	}
}

// writeConflist writes level l's arm E conflist into its node's directory
// (what `podwire repair --conflist` reads) and returns its path.
func writeConflist(l *level) (string, error) {
	path := filepath.Join(l.n.dir, "repair.conflist")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(l.n.dir, 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, l.e.list.Bytes, 0o644)
}

// agentAt runs the agent on level l's node: its RSS 10 s after it is Ready,
// and the median of three repairs of `nft flush ruleset` (ms).
func agentAt(b *testing.B, l *level) (rss int64, repairMs float64) {
	cmd := startAgentProc(b, l.n, l.e, "")
	defer stopAgentProc(cmd)
	time.Sleep(10 * time.Second)
	rss, err := procRSS(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	var c *nftables.Conn
	if err := l.n.NS.Do(func(ns.NetNS) (err error) { c, err = nftables.New(nftables.AsLasting()); return err }); err != nil {
		b.Fatal(err)
	}
	defer c.CloseLasting()
	want, err := podwireSets(c)
	if err != nil || len(want) == 0 {
		b.Fatalf("podwire's tables at %d pods: %v %v", l.pods, want, err)
	}
	var took []float64
	for range 3 {
		c.FlushRuleset()
		if err := c.Flush(); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for {
			got, err := podwireSets(c)
			if err == nil && equalSets(got, want) {
				break
			}
			if time.Since(start) > 60*time.Second {
				b.Fatalf("%d pods: not repaired within 60 s: %v, want %v (%v)", l.pods, got, want, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		took = append(took, ms(time.Since(start)))
		time.Sleep(500 * time.Millisecond)
	}
	slices.Sort(took)
	return rss, took[1]
}
