package bench

import (
	"bytes"
	_ "embed"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/sourcecheck"
)

// level is a node with existing podwire pods, made through the real chain
// (ptp + host-local + podwire); BenchmarkScaling and BenchmarkThroughput
// share it.
type level struct {
	pods int
	name string // the pods, or the node's name
	n    *node
	a, e *arm // A is named as E: host-local's cost grows with the leases of the network
	sub  int
}

var levelCache = map[int]*level{}

// levelNode is the node of the i-th BENCH_LEVELS entry, pods existing pods.
func levelNode(b *testing.B, i, pods int) *level {
	if l := levelCache[pods]; l != nil {
		return l
	}
	n := newNode(b, fmt.Sprintf("scale-%d", pods))
	l := &level{pods: pods, name: fmt.Sprint(pods), n: n, a: newArm(b, "A", n, 70+i, "bench-E"), e: newArm(b, "E", n, 70+i, "bench-E"), sub: 70 + i}
	t0 := time.Now()
	for j := 0; j < pods; j++ {
		check(b)
		n.keep(b, l.e, j)
	}
	b.Logf("%s: %d existing pods in %s", n.name, pods, time.Since(t0).Round(time.Second))
	levelCache[pods] = l
	return l
}

// BenchmarkScaling measures, on one node per BENCH_LEVELS entry, round-robin
// over the levels and within a level over: ptp + host-local alone (A), the
// podwire chain (E), the chain right after every podwire table was deleted
// ("first": the tables rebuilt, every recorded pod's elements re-added),
// and podwire run directly, steady ("alone") and first ("alonefirst").
// Metrics are "<op>@<existing pods>-add-ms" and so on. BENCH_WRAP wraps
// podwire run directly in the unmeasured round (scripts/profile.sh).
func BenchmarkScaling(b *testing.B) {
	var lv []*level
	for i, pods := range envInts(b, "BENCH_LEVELS", "0,100,1000") {
		lv = append(lv, levelNode(b, i, pods))
	}
	compare(b, lv, os.Getenv("BENCH_WRAP"), "A", "E", "first", "alone", "alonefirst")
}

// compare runs the ops round-robin over the nodes and, within a node, over
// the ops (see BenchmarkScaling), as "<op>@<node's level or name>-add-ms";
// podwire run directly runs under wrapTmpl in the unmeasured round.
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
// chain each and Endpoints endpoint chains each, and Idle services without
// endpoints (set and map elements only).
type foreignShape struct{ Services, Endpoints, Idle int }

// BenchmarkForeign compares a clean node with one whose netns holds a
// kube-proxy-shaped ruleset (kubeproxy.nft.tmpl, BENCH_FOREIGN, by default
// 20000 chains, 100000 rules and 50000 set and map elements), loaded with
// `nft -f`: round-robin over the nodes and over A, E and podwire run
// directly ("<op>@clean-add-ms", "<op>@foreign-add-ms").
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
	var load cost
	err := sides[1].n.NS.Do(func(ns.NetNS) (err error) {
		load, err = run(exec.Command("nft", "-f", "-"), rules.Bytes())
		return err
	})
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

// fakeBridgedPods adds count pods' elements (a port each, one IPv4 and one
// IPv6 address) to "bridge podwire", with no port behind them: the set
// sizes of a node with that many pods on its bridge.
func (n *node) fakeBridgedPods(count int) error {
	e := nft.Elements{}
	for i := 0; i < count; i++ {
		sourcecheck.AddElements(e, sourcecheck.Pod{HostIfName: fmt.Sprintf("vethfk%08x", i), Bridged: true,
			Name: fmt.Sprintf("bench/fake-%d", i), Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, 251, byte(i >> 8), byte(i)}),
				netip.MustParseAddr(fmt.Sprintf("fd00:251::%x", i))}})
	}
	return withConn(n.NS, func(c nft.Conn) error { return nft.AddElements(c, []*nft.Table{sourcecheck.BridgeTable()}, e) })
}
