// Command bench measures podwire's cost against the reference CNI plugins and
// a do-nothing chained plugin (the floor), through libcni, in network
// namespaces of its own (never the host's), and writes docs/benchmarks.md.
//
// It is run by scripts/bench.sh (`make bench`), as root; `make test` never
// runs it. Numbers are whatever the run gives: nothing here asserts them.
//
// Every comparison is interleaved round-robin (each round runs every arm
// once, starting from a different arm), so that the noise of a shared
// machine falls on every arm alike.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/podwire/podwire/internal/testns"
	"github.com/vishvananda/netlink"
)

func init() {
	// Namespace switches are per OS thread.
	runtime.LockOSThread()
}

type options struct {
	rounds     int
	warmup     int
	levels     []int
	ppsSeconds float64
	ppsBursts  int
	out        string
	strace     bool
	rev        string
	traceDir   string
	notes      []string
	profWrap   string
	profFirst  bool
	foreign    foreignShape
	vlanVM     string // file with the VM's PODWIRE-VLAN-BENCH line
	phases     map[string]bool
	compare    string // another podwire binary for the direct phase (A/B of a change)
	synthetic  bool   // existing pods of the scaling levels are cloned records, not pods
}

// phaseNames are the parts of a run, in order; -phases picks some of them.
var phaseNames = []string{"startup", "grace", "requests", "latency", "direct", "scaling", "foreign", "throughput"}

// phase reports whether the run includes the named phase.
func (o *options) phase(name string) bool { return o.phases == nil || o.phases[name] }

// bench holds the run's setup and results.
type bench struct {
	opt        options
	podwireBin string
	cniBin     string
	benchBin   string
	binDirs    []string
	workDir    string // on disk: libcni cache, host-local leases
	stateRoot  string // on tmpfs: podwire state, as /run/podwire on a node
	nodes      []*node
	progress   func(format string, a ...any)

	r report
}

func main() {
	var o options
	var levels string
	flag.IntVar(&o.rounds, "n", 30, "measured rounds per comparison (pods per arm)")
	flag.IntVar(&o.warmup, "warmup", 2, "unmeasured rounds first")
	flag.StringVar(&levels, "levels", "0,100,1000", "existing podwire pods for the scaling runs")
	o.foreign = defaultForeign
	flag.Func("foreign", "the other owner's ruleset on the foreign-ruleset node: services,endpoints-per-service,services-without-endpoints (default 5000,3,17500: 20000 chains, 100000 rules, 50000 elements; 0,0,0 skips the phase)", func(v string) error {
		_, err := fmt.Sscanf(v, "%d,%d,%d", &o.foreign.services, &o.foreign.endpoints, &o.foreign.idle)
		return err
	})
	flag.Float64Var(&o.ppsSeconds, "pps-seconds", 1.5, "seconds per UDP burst")
	flag.IntVar(&o.ppsBursts, "pps-bursts", 4, "UDP bursts per arm")
	flag.StringVar(&o.out, "out", "docs/benchmarks.md", "report to write")
	flag.BoolVar(&o.strace, "strace", false, "also profile one podwire ADD/DEL per scaling level with strace -c -f")
	flag.StringVar(&o.rev, "rev", "", "podwire revision measured (git describe)")
	flag.StringVar(&o.traceDir, "trace-dir", "", "with -strace: also keep strace -f -tt -T timelines of one podwire ADD/DEL per level here")
	flag.StringVar(&o.profWrap, "profile-wrap", "", "with -strace: also run one podwire ADD per level under this command line (%d: the level; with %v, the verb, its DEL too), e.g. \"perf record -g -o /tmp/perf-%d-%v.data --\"")
	flag.BoolVar(&o.profFirst, "profile-first", false, "with -profile-wrap: the wrapped ADD is a first invocation (podwire's tables deleted before it)")
	flag.Func("note", "a line for the report's machine section (repeatable)", func(v string) error {
		o.notes = append(o.notes, v)
		return nil
	})
	flag.StringVar(&o.vlanVM, "vlan-vm", "", "the VM's VLAN benchmark output (scripts/vm-test.sh with PODWIRE_VM_BENCH=VLANAttachment), for row G")
	flag.Func("phases", "comma-separated parts to run, for a quick look (default all: "+strings.Join(phaseNames, ",")+"); the report has only their sections", func(v string) error {
		o.phases = map[string]bool{}
		for _, f := range strings.Split(v, ",") {
			if !slices.Contains(phaseNames, f) {
				return fmt.Errorf("unknown phase %q (want some of %s)", f, strings.Join(phaseNames, ","))
			}
			o.phases[f] = true
		}
		return nil
	})
	flag.BoolVar(&o.synthetic, "synthetic-existing", false, "a quick look at a level (not for the report): one existing pod is made through the chain and the others are clones of its record, with no veth, route or lease, so only podwire's first invocation and its records are as at that level")
	flag.StringVar(&o.compare, "compare", "", "another podwire binary, run directly beside -podwire in the direct phase (the A/B of a change)")
	podwire := flag.String("podwire", "bin/podwire", "podwire binary")
	cniBin := flag.String("cni-bin", ".cache/cni-bin", "reference plugins (ptp, host-local, tuning, portmap)")
	benchBin := flag.String("bench-bin", ".cache/bench-bin", "dir holding the passthrough plugin")
	flag.Parse()
	for _, f := range strings.Split(levels, ",") {
		l, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || l < 0 {
			fatal(fmt.Errorf("bad -levels %q", levels))
		}
		o.levels = append(o.levels, l)
	}
	if os.Geteuid() != 0 {
		fatal(fmt.Errorf("bench needs root (network namespaces, nftables)"))
	}
	b := &bench{opt: o, progress: func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(f, a...))
	}}
	var err error
	for _, p := range []*string{podwire, cniBin, benchBin} {
		if *p, err = filepath.Abs(*p); err != nil {
			fatal(err)
		}
	}
	b.podwireBin, b.cniBin, b.benchBin = *podwire, *cniBin, *benchBin
	b.binDirs = []string{filepath.Dir(b.podwireBin), b.cniBin, b.benchBin}
	for _, p := range []string{b.podwireBin, filepath.Join(b.cniBin, "ptp"), filepath.Join(b.cniBin, "host-local"),
		filepath.Join(b.cniBin, "tuning"), filepath.Join(b.cniBin, "portmap"), filepath.Join(b.benchBin, "passthrough")} {
		if _, err := os.Stat(p); err != nil {
			fatal(fmt.Errorf("missing %s: run `make bench`", p))
		}
	}
	if b.workDir, err = os.MkdirTemp("", "podwire-bench-"); err != nil {
		fatal(err)
	}
	// podwire's state lives on tmpfs on a real node (/run/podwire); /run
	// is on disk here, so use /dev/shm when it is a tmpfs.
	shmRoot := "/dev/shm"
	if _, err := os.Stat(shmRoot); err != nil {
		shmRoot = ""
	}
	if b.stateRoot, err = os.MkdirTemp(shmRoot, "podwire-bench-state-"); err != nil {
		fatal(err)
	}
	// SIGINT or SIGTERM (^C, timeout(1)) ends the run at the next round and
	// still removes every netns and directory it made.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		b.progress("%v: stopping after this round, then cleaning up", s)
		interrupted.Store(true)
	}()
	err = b.run()
	b.cleanup()
	if err != nil {
		fatal(err)
	}
}

// interrupted is set by SIGINT or SIGTERM; every round loop checks it.
var interrupted atomic.Bool

var errInterrupted = errors.New("interrupted")

// checkInterrupted returns errInterrupted once the run was told to stop.
func checkInterrupted() error {
	if interrupted.Load() {
		return errInterrupted
	}
	return nil
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

func (b *bench) cleanup() {
	b.progress("removing %d node netns and their pods", len(b.nodes))
	for _, n := range b.nodes {
		n.close()
	}
	_ = os.RemoveAll(b.workDir)
	_ = os.RemoveAll(b.stateRoot)
}

func (b *bench) run() error {
	start := time.Now()
	b.r.machine = describeMachine(b)
	b.r.sizes = binarySizes(b)
	b.r.vlanOK, b.r.vlanReason = probeVLANFiltering()
	if b.opt.vlanVM != "" {
		b.r.vlanVM = readVLANVM(b.opt.vlanVM)
	}
	steps := []struct {
		name, what string
		run        func() error
	}{
		{"startup", "start-up: CNI VERSION of podwire and of the minimal plugin", b.startup},
		{"grace", "kernel grace period of an nftables element delete", b.grace},
		{"requests", "an ADD's and a DEL's nftables requests and record, made by podwire's packages in the bench", b.requests},
		{"latency", fmt.Sprintf("latency arms (%d rounds + %d warm-up)", b.opt.rounds, b.opt.warmup), b.latency},
		{"direct", "podwire, passthrough and tuning run directly (time, CPU, page faults)", b.direct},
		{"scaling", fmt.Sprintf("scaling at %v existing podwire pods", b.opt.levels), b.scaling},
		{"foreign", "", b.foreign},
		{"throughput", "UDP throughput through the source check", b.throughput},
	}
	for _, st := range steps {
		if err := checkInterrupted(); err != nil {
			return err
		}
		if !b.opt.phase(st.name) {
			continue
		}
		if st.name == "foreign" {
			if b.opt.foreign.services == 0 {
				continue
			}
			c, r, e := b.opt.foreign.counts()
			st.what = fmt.Sprintf("clean node against one with %d foreign chains, %d rules, %d elements", c, r, e)
		}
		b.progress("%s", st.what)
		if err := st.run(); err != nil {
			return err
		}
	}
	b.r.duration = time.Since(start)
	b.r.loadEnd = loadavg()
	if err := os.MkdirAll(filepath.Dir(b.opt.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(b.opt.out, []byte(b.r.markdown(b)), 0o644); err != nil {
		return err
	}
	b.progress("wrote %s in %s", b.opt.out, b.r.duration.Round(time.Second))
	return nil
}

// probeVLANFiltering reports whether a bridge with VLAN filtering can be
// made (in a throwaway netns).
func probeVLANFiltering() (bool, string) {
	t, err := testns.Make()
	if err != nil {
		return false, err.Error()
	}
	defer testns.Release(t)
	err = t.Do(func(ns.NetNS) error {
		on := true
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}, VlanFiltering: &on}); err != nil {
			return err
		}
		l, err := netlinksafe.LinkByName("probe0")
		if err != nil {
			return err
		}
		if br, ok := l.(*netlink.Bridge); !ok || br.VlanFiltering == nil || !*br.VlanFiltering {
			return fmt.Errorf("the bridge was made without VLAN filtering")
		}
		return nil
	})
	if err != nil {
		return false, fmt.Sprintf("this kernel (%s) cannot make a bridge with VLAN filtering: %v", kernel(), err)
	}
	return true, ""
}

// runCmd returns a command's trimmed output, or "" when it fails.
func runCmd(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
