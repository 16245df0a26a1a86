package bench

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
)

// level is a node with existing pods made through arm E, which
// BenchmarkScaling and BenchmarkThroughput share.
type level struct {
	pods int
	name string // the pods, or the node's name
	n    *node
	a, e *arm // A is named as E: host-local's cost grows with the leases of the network
}

var levelCache = map[int]*level{}

// levelNode is the node of the i-th BENCH_LEVELS entry, pods existing pods.
func levelNode(b *testing.B, i, pods int) *level {
	if l := levelCache[pods]; l != nil {
		return l
	}
	n := newNode(b, fmt.Sprintf("scale-%d", pods))
	l := &level{pods: pods, name: fmt.Sprint(pods), n: n, a: newArm(b, "A", n, 70+i, "bench-E"), e: newArm(b, "E", n, 70+i, "bench-E")}
	t0 := time.Now()
	for j := 0; j < pods; j++ {
		check(b)
		n.keep(b, l.e, j)
	}
	b.Logf("%s: %d existing pods in %s", n.name, pods, time.Since(t0).Round(time.Second))
	levelCache[pods] = l
	return l
}

// BenchmarkScaling measures, on one node per BENCH_LEVELS entry: A, E, E
// right after every podwire table was deleted ("first": the tables rebuilt,
// every recorded pod's elements re-added), and podwire run directly, steady
// ("alone") and first ("alonefirst"), as "<op>@<existing pods>-add-ms" and
// so on.
func BenchmarkScaling(b *testing.B) {
	var lv []*level
	for i, pods := range envInts(b, "BENCH_LEVELS", "0,100,1000") {
		lv = append(lv, levelNode(b, i, pods))
	}
	compare(b, lv, os.Getenv("BENCH_WRAP"), "A", "E", "first", "alone", "alonefirst")
}

// compare runs the ops (see BenchmarkScaling) round-robin over the nodes
// and, within a node, over the ops; podwire run directly runs under
// wrapTmpl (BENCH_WRAP, for scripts/profile.sh) in the unmeasured round.
func compare(b *testing.B, nodes []*level, wrapTmpl string, ops ...string) {
	seq := 100000
	rounds(b, len(nodes), func(r, i int, s samples) error {
		l := nodes[i]
		for k := range ops {
			op := ops[(k+r+len(ops))%len(ops)]
			seq++
			wrap := ""
			if r < 0 { // profile the unmeasured round only
				wrap = strings.NewReplacer("%d", l.name, "%o", op).Replace(wrapTmpl)
			}
			if op == "first" || op == "alonefirst" {
				// every podwire table deleted (as by `podwire uninstall`): the
				// next ADD is a first invocation
				err := withConn(l.n.NS, func(c nft.Conn) error { _, err := nodetables.RemoveAll(c); return err })
				if err != nil {
					return err
				}
			}
			var add, del cost
			var err error
			switch op {
			case "A":
				add, del, err = l.n.addDel(l.a, seq)
			case "E", "first":
				add, del, err = l.n.addDel(l.e, seq)
			default:
				add, del, err = l.n.alone(cnitest.PodwireBin(), l.a, seq, podwireEntry(l.n, nil), wrap)
			}
			if err != nil {
				return err
			}
			s.put(op+"@"+l.name+"-add", add)
			s.put(op+"@"+l.name+"-del", del)
		}
		return nil
	})
}

//go:embed kubeproxy.nft.tmpl
var kubeProxyTmpl string

// foreignShape is the size of another owner's ruleset: services with a
// chain and Endpoints endpoint chains each, and Idle services (elements
// only).
type foreignShape struct{ Services, Endpoints, Idle int }

// BenchmarkForeign compares A, E and podwire run directly on a clean node
// and on one holding a kube-proxy-shaped ruleset (kubeproxy.nft.tmpl,
// BENCH_FOREIGN), loaded with `nft -f`: "<op>@clean-add-ms",
// "<op>@foreign-add-ms".
func BenchmarkForeign(b *testing.B) {
	v := envInts(b, "BENCH_FOREIGN", "5000,3,17500")
	if len(v) != 3 {
		b.Fatal("BENCH_FOREIGN is services,endpoints,idle")
	}
	f := foreignShape{v[0], v[1], v[2]}
	sides := []*level{{name: "clean", n: newNode(b, "clean")}, {name: "foreign", n: newNode(b, "foreign")}}
	for i, sd := range sides {
		sd.a, sd.e = newArm(b, "A", sd.n, 60+i, "bench-E"), newArm(b, "E", sd.n, 60+i, "bench-E")
		b.Cleanup(sd.n.close) // 100000 rules need not outlive the benchmark
	}
	ip := func(base, j int) string { return fmt.Sprintf("10.%d.%d.%d", base+j>>16, (j>>8)&255, j&255) }
	t := template.Must(template.New("").Funcs(template.FuncMap{
		"add":   func(a, b int) int { return a + b },
		"svcIP": func(i int) string { return ip(96, i) },
		"epIP":  func(i, e int) string { return ip(200, i*f.Endpoints+e) },
		"svcChain": func(i int) string {
			return fmt.Sprintf("service-%08X-ns%d/svc%d/tcp/http", uint32(i)*2654435761, i%50, i)
		},
		"epChain": func(i, e int) string {
			return fmt.Sprintf("endpoint-%08X-ns%d/svc%d/tcp/http__%s/8080", uint32(i*8+e)*2246822519, i%50, i, ip(200, i*f.Endpoints+e))
		},
	}).Parse(kubeProxyTmpl))
	var rules bytes.Buffer
	if err := t.Execute(&rules, f); err != nil {
		b.Fatal(err)
	}
	load, err := sides[1].n.run(exec.Command("nft", "-f", "-"), rules.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	compare(b, sides, "", "A", "E", "alone")
	chains := f.Services * (1 + f.Endpoints)
	b.ReportMetric(float64(chains), "chains")
	b.ReportMetric(float64(5*chains), "rules")
	b.ReportMetric(float64(2*(f.Services+f.Idle)+2*f.Services), "elements")
	b.ReportMetric(load.wall/1000, "load-s")
}
