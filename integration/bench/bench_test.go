// Package bench measures podwire's cost against the reference CNI plugins
// and a do-nothing chained plugin (passthrough/, the floor), through libcni,
// in network namespaces of its own. scripts/bench.sh runs it as root (`make
// bench`, never `make test`) and report/ writes docs/benchmarks.md from its
// output; nothing asserts a figure. README.md says what each benchmark
// measures, how its figures are named and which environment it reads.
package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/internal/testns"
)

// egressV4 and egressV6 are egress IPs on the node's uplink.
const egressV4, egressV6 = "203.0.113.10", "2001:db8::10"

var (
	workDir, stateRoot string  // libcni cache and leases on disk; podwire state on tmpfs
	nodes              []*node // closed by TestMain
	interrupted        context.Context
)

// TestMain makes the work directories and, after the benchmarks (a SIGINT or
// SIGTERM ends them at the next round), removes every netns and directory.
func TestMain(m *testing.M) {
	var err error
	if workDir, err = os.MkdirTemp("", "podwire-bench-"); err != nil {
		log.Fatal(err)
	}
	// podwire's state lives on tmpfs on a node (/run/podwire).
	if stateRoot, err = os.MkdirTemp("/dev/shm", "podwire-bench-state-"); err != nil {
		stateRoot, _ = os.MkdirTemp(workDir, "state-")
	}
	interrupted, _ = signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := m.Run()
	for _, n := range nodes {
		n.close()
	}
	_ = os.RemoveAll(workDir)
	_ = os.RemoveAll(stateRoot)
	os.Exit(code)
}

// check ends b when the run was told to stop.
func check(b *testing.B) {
	if interrupted.Err() != nil {
		b.Fatal("interrupted")
	}
}

// uplink makes the node's "eth0": a veth pair stands for the NIC (this
// kernel may lack the dummy driver), its peer up so that it has a carrier.
const uplink = `link add eth0 type veth peer name eth0-peer
link set eth0-peer up
addr add 192.0.2.1/24 dev eth0
addr add 2001:db8:1::1/64 dev eth0
addr add ` + egressV4 + `/32 dev eth0
addr add ` + egressV6 + `/128 dev eth0
link set eth0 up
route add default via 192.0.2.254 dev eth0
route add default via 2001:db8:1::fe dev eth0
`

// node is a simulated Kubernetes node: a netns that forwards, its uplink,
// and its directories (libcni's cache, host-local's leases, podwire's).
type node struct {
	*cnitest.Client
	name, dir, stateDir string
	pods                []*pod // kept pods (existing pods of a level)
}

// newNode makes a node; TestMain (or close) removes it.
func newNode(b *testing.B, name string) *node {
	if os.Geteuid() != 0 {
		b.Skip("needs root (network namespaces, nftables)")
	}
	nodeNS, err := testns.Make()
	if err != nil {
		b.Fatal(err)
	}
	n := &node{name: name, dir: filepath.Join(workDir, name), stateDir: filepath.Join(stateRoot, name)}
	n.Client = cnitest.NewClient(nodeNS, append(cnitest.Plugins(), benchBin()), filepath.Join(n.dir, "cache"))
	nodes = append(nodes, n)
	if err := cnitest.Sysctls(nodeNS, cnitest.RouterSysctls...); err != nil {
		b.Fatal(err)
	}
	if _, err := n.run(exec.Command("ip", "-batch", "-"), []byte(uplink)); err != nil {
		b.Fatalf("node %s uplink: %v", name, err)
	}
	return n
}

// close removes the netns of the node and its kept pods, and with them all
// the kernel holds in them.
func (n *node) close() {
	for _, p := range n.pods {
		testns.Release(p.NS)
	}
	n.pods = nil
	if n.NS != nil {
		testns.Release(n.NS)
		n.NS = nil
	}
}

// benchBin holds passthrough (scripts/bench.sh builds it there).
func benchBin() string { return cmp.Or(os.Getenv("BENCH_BIN"), "../../.cache/bench-bin") }

// envInts is a comma-separated list of integers from the environment.
func envInts(b *testing.B, key, def string) []int {
	list := cmp.Or(os.Getenv(key), def)
	var out []int
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 {
			b.Fatalf("bad %s %q", key, list)
		}
		out = append(out, v)
	}
	return out
}

// pod is one pod sandbox: its netns, runtime config and result.
type pod = cnitest.Sandbox

// cost is what one operation took: wall and CPU ms, and minor page faults.
type cost struct{ wall, cpu, faults float64 }

// timed runs f and returns its wall time and the CPU time that
// getrusage(who) counts meanwhile: RUSAGE_CHILDREN for the plugin processes
// (each is waited for, and one operation runs at a time), RUSAGE_THREAD or
// RUSAGE_SELF for work made in the bench.
func timed(who int, f func() error) (cost, error) {
	cpu := func() float64 {
		var ru unix.Rusage
		_ = unix.Getrusage(who, &ru)
		return ms(time.Duration(ru.Utime.Nano() + ru.Stime.Nano()))
	}
	c0, t0 := cpu(), time.Now()
	err := f()
	return cost{wall: ms(time.Since(t0)), cpu: cpu() - c0}, err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// newPod makes a pod netns (IPv6 DAD off, so that ptp does not wait for its
// address) and the runtime config a CRI runtime would send for arm a.
func newPod(a *arm, seq int) (*pod, error) {
	podNS, err := cnitest.NewPodNS()
	if err != nil {
		return nil, err
	}
	args := a.args
	args.Name = fmt.Sprintf("bench-%s-%d", a.key, seq)
	return &pod{NS: podNS, RT: args.RuntimeConf(podNS.Path())}, nil
}

// attach makes a pod of arm a and runs ADD through its chain (a DEL after a
// failed ADD, as a runtime does).
func (n *node) attach(a *arm, seq int) (*pod, cost, error) {
	p, err := newPod(a, seq)
	if err != nil {
		return nil, cost{}, err
	}
	c, err := timed(unix.RUSAGE_CHILDREN, func() (err error) { p.Result, p.Version, err = n.Attach(a.list, p.RT); return err })
	if err != nil {
		testns.Release(p.NS)
		return nil, c, err
	}
	return p, c, nil
}

// addDel makes a pod of arm a, times its ADD and DEL (with libcni's cached
// prevResult) and removes its netns.
func (n *node) addDel(a *arm, seq int) (add, del cost, err error) {
	p, add, err := n.attach(a, seq)
	if err == nil {
		defer testns.Release(p.NS)
		del, err = timed(unix.RUSAGE_CHILDREN, func() error { return n.Del(a.list, p.RT) })
	}
	if err != nil {
		err = fmt.Errorf("arm %s on %s: %w", a.key, n.name, err)
	}
	return add, del, err
}

// keep makes a pod through arm a and keeps it (an existing pod).
func (n *node) keep(b *testing.B, a *arm, seq int) *pod {
	p, _, err := n.attach(a, seq)
	if err != nil {
		b.Fatalf("pod %d of arm %s on %s: %v", seq, a.key, n.name, err)
	}
	n.pods = append(n.pods, p)
	return p
}

// run runs cmd in the node netns (see run).
func (n *node) run(cmd *exec.Cmd, stdin []byte) (c cost, err error) {
	err = n.NS.Do(func(ns.NetNS) error { c, err = run(cmd, stdin); return err })
	return c, err
}

// run runs cmd with stdin: its wall time, and wait4's rusage of the process.
func run(cmd *exec.Cmd, stdin []byte) (cost, error) {
	var out bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &out
	t0 := time.Now()
	err := cmd.Run()
	c := cost{wall: ms(time.Since(t0))}
	if err != nil {
		return c, fmt.Errorf("%s: %v: %s", cmd, err, out.Bytes())
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	c.cpu, c.faults = ms(time.Duration(ru.Utime.Nano()+ru.Stime.Nano())), float64(ru.Minflt)
	return c, nil
}

// samples are the figures of the measured rounds, by metric name.
type samples map[string][]float64

// put records c as "<name>-ms", "-cpu-ms" and (a process's) "-faults".
func (s samples) put(name string, c cost) {
	s[name+"-ms"] = append(s[name+"-ms"], c.wall)
	s[name+"-cpu-ms"] = append(s[name+"-cpu-ms"], c.cpu)
	if c.faults > 0 {
		s[name+"-faults"] = append(s[name+"-faults"], c.faults)
	}
}

// report reports each metric's p50 and p90 (nearest rank), and "max-" faults.
func (s samples) report(b *testing.B) {
	for name, v := range s {
		slices.Sort(v)
		pct := func(p float64) float64 { return v[max(0, min(len(v)-1, int(float64(len(v))*p+0.5)-1))] }
		b.ReportMetric(pct(0.5), name)
		b.ReportMetric(pct(0.9), "p90-"+name)
		if strings.HasSuffix(name, "-faults") {
			b.ReportMetric(v[len(v)-1], "max-"+name)
		}
	}
}

// rounds runs a round once unmeasured (r = -1), then once per b.Loop
// iteration (r = 0, 1, ...). A round calls arm(r, i, s) for every i < n,
// the first i rotated by r; s takes the figures of the measured rounds.
func rounds(b *testing.B, n int, arm func(r, i int, s samples) error) {
	s := samples{}
	for r := -1; r < 0 || b.Loop(); r++ {
		for k := range n {
			check(b)
			if err := arm(r, (k+r+n)%n, s); err != nil {
				b.Fatal(err)
			}
		}
		if r < 0 {
			clear(s) // the unmeasured round's
		}
	}
	s.report(b)
}
