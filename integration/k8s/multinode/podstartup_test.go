package multinode

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// podStartupPods is the burst of TestPodStartup: pods created at once.
const podStartupPods = 30

// TestPodStartup records what users feel of podwire at pod start: the
// time from creation to Running of podStartupPods pods created at
// once through the API (half on each node), with podwire chained after
// flannel and without it (`helm uninstall`: the chain is flannel, portmap),
// PODWIRE_K8S_PODSTARTUP_BURSTS bursts of each (even, default 2) in the
// order with (half), without (all), with (half), so that a drift of the
// machine falls on both alike. It prints, per burst, the p50 and the
// maximum of the pods' times (each pod's Running seen by polling the API
// every 50 ms) and the means of both sides, as "pod-startup:" lines;
// docs/benchmarks.md quotes them. It asserts only that every pod ran and
// went, not a figure: a timed test on a shared machine would be flaky.
// Opt-in (PODWIRE_K8S_PODSTARTUP=1, `make bench-k8s`): it adds about two
// minutes to the suite. With PODWIRE_K8S_PODSTARTUP_OUT it also writes the
// means as "podstartup-...: value" lines into that file, which `make bench`
// puts into docs/benchmarks.md.
func TestPodStartup(t *testing.T) {
	if os.Getenv("PODWIRE_K8S_PODSTARTUP") == "" {
		t.Skip("opt-in: PODWIRE_K8S_PODSTARTUP=1 (make bench-k8s)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ns := "pod-startup"
	kubectl(t, "", "create", "namespace", ns)
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", ns, "--wait=false") })

	sides := map[string][]burst{}
	round := func(t *testing.T, i int, side string) {
		b, err := startBurst(ctx, ns, fmt.Sprintf("r%d", i))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("pod-startup: round %d, %s: %d pods, p50 %.2f s, max %.2f s, machine busy %.1f CPU-s, podwire-agent %.2f CPU-s\n",
			i, side, podStartupPods, b.p50.Seconds(), b.max.Seconds(), b.busy, b.byComm["podwire-agent"])
		sides[side] = append(sides[side], b)
	}
	n := 2
	if v := os.Getenv("PODWIRE_K8S_PODSTARTUP_BURSTS"); v != "" {
		if n, _ = strconv.Atoi(v); n < 2 || n%2 != 0 {
			t.Fatalf("PODWIRE_K8S_PODSTARTUP_BURSTS=%q: want an even number, at least 2", v)
		}
	}
	i := 0
	for range n / 2 {
		round(t, i, "with podwire")
		i++
	}
	t.Run("without", func(t *testing.T) {
		withoutPodwire(ctx, t) // installed again when this subtest ends
		for range n {
			round(t, i, "without podwire")
			i++
		}
	})
	for range n / 2 {
		round(t, i, "with podwire")
		i++
	}
	mean := func(bs []burst, f func(burst) time.Duration) float64 {
		var s time.Duration
		for _, b := range bs {
			s += f(b)
		}
		return s.Seconds() / float64(len(bs))
	}
	w, wo := sides["with podwire"], sides["without podwire"]
	if out := os.Getenv("PODWIRE_K8S_PODSTARTUP_OUT"); out != "" && len(wo) > 0 {
		figures := fmt.Sprintf("podstartup-date: %s\npodstartup-pods: %d\npodstartup-bursts: %d\n",
			time.Now().UTC().Format("2006-01-02 15:04 UTC"), podStartupPods, len(w))
		for _, side := range []struct {
			key string
			bs  []burst
		}{{"with", w}, {"without", wo}} {
			figures += fmt.Sprintf("podstartup-%[1]s-p50-s: %.3[2]f\npodstartup-%[1]s-max-s: %.3[3]f\npodstartup-%[1]s-busy-cpu-s: %.2[4]f\n", side.key,
				mean(side.bs, func(b burst) time.Duration { return b.p50 }), mean(side.bs, func(b burst) time.Duration { return b.max }),
				meanOf(side.bs, func(b burst) float64 { return b.busy }))
			for _, comm := range reportedComms {
				figures += fmt.Sprintf("podstartup-%s-cpu-%s-s: %.2f\n", side.key, comm, meanOf(side.bs, func(b burst) float64 { return b.byComm[comm] }))
			}
		}
		if err := os.WriteFile(out, []byte(figures), 0o644); err != nil {
			t.Error(err)
		}
	}
	fmt.Printf("pod-startup: mean of %d bursts of %d pods: with podwire p50 %.2f s, max %.2f s; without p50 %.2f s, max %.2f s; with / without: p50 %.3f, max %.3f\n",
		len(w), podStartupPods,
		mean(w, func(b burst) time.Duration { return b.p50 }), mean(w, func(b burst) time.Duration { return b.max }),
		mean(wo, func(b burst) time.Duration { return b.p50 }), mean(wo, func(b burst) time.Duration { return b.max }),
		mean(w, func(b burst) time.Duration { return b.p50 })/mean(wo, func(b burst) time.Duration { return b.p50 }),
		mean(w, func(b burst) time.Duration { return b.max })/mean(wo, func(b burst) time.Duration { return b.max }))
	fmt.Printf("pod-startup: machine busy per burst, creation to the last Running: with podwire %.1f CPU-s (podwire-agent %.2f), without %.1f CPU-s\n",
		meanOf(w, func(b burst) float64 { return b.busy }), meanOf(w, func(b burst) float64 { return b.byComm["podwire-agent"] }),
		meanOf(wo, func(b burst) float64 { return b.busy }))
	printByComm(w, wo)
}

// printByComm prints the mean CPU time per burst of each process name with
// and without podwire, the names whose difference is largest first: where
// a burst with podwire spends its CPU.
func printByComm(w, wo []burst) {
	names := map[string]bool{}
	for _, b := range append(slices.Clone(w), wo...) {
		for n := range b.byComm {
			names[n] = true
		}
	}
	type row struct {
		name     string
		with, wo float64
	}
	var rows []row
	for n := range names {
		rows = append(rows, row{n, meanOf(w, func(b burst) float64 { return b.byComm[n] }), meanOf(wo, func(b burst) float64 { return b.byComm[n] })})
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(math.Abs(b.with-b.wo), math.Abs(a.with-a.wo)) })
	for _, r := range rows[:min(len(rows), 20)] {
		fmt.Printf("pod-startup: CPU-s per burst by process: %-18s with %6.2f  without %6.2f  difference %+6.2f\n", r.name, r.with, r.wo, r.with-r.wo)
	}
}

// meanOf is the mean of f over bs.
func meanOf(bs []burst, f func(burst) float64) float64 {
	var s float64
	for _, b := range bs {
		s += f(b)
	}
	return s / float64(len(bs))
}

// burst is one burst's figures: the p50 and the maximum of the pods'
// times from creation to Running, and the CPU time spent from the first
// creation to the last Running, in seconds: busy, by the whole machine
// (both nodes share its CPUs, so a burst's pods wait for CPU that any of
// it takes), and byComm, by process name (procCPU).
type burst struct {
	p50, max time.Duration
	busy     float64
	byComm   map[string]float64
}

// startBurst creates podStartupPods pods at once (named prefix-N, on the
// nodes in turn), waits until each is Running, then deletes them, waits
// until they are gone and removes their stopped sandboxes.
func startBurst(ctx context.Context, ns, prefix string) (burst, error) {
	created := make([]time.Time, podStartupPods)
	busy0, procs0 := machineBusy(), procCPU()
	var wg sync.WaitGroup
	errs := make([]error, podStartupPods)
	for i := range podStartupPods {
		wg.Go(func() {
			created[i] = time.Now()
			errs[i] = createPod(ctx, ns, fmt.Sprintf("%s-%d", prefix, i), c.Nodes[i%len(c.Nodes)], map[string]string{"burst": prefix}, nil)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return burst{}, err
		}
	}
	running, uids := map[string]time.Time{}, map[string]string{}
	for len(running) < podStartupPods {
		if err := ctx.Err(); err != nil {
			return burst{}, fmt.Errorf("%d of %d pods Running: %w", len(running), podStartupPods, err)
		}
		phases, err := podPhases(ctx, ns, "burst="+prefix)
		if err != nil {
			return burst{}, err
		}
		now := time.Now()
		for name, p := range phases {
			if _, seen := running[name]; !seen && p.Phase == "Running" {
				running[name], uids[name] = now, p.UID
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	busy, byComm := machineBusy()-busy0, cpuByComm(procs0, procCPU())
	var times []time.Duration
	for i := range podStartupPods {
		times = append(times, running[fmt.Sprintf("%s-%d", prefix, i)].Sub(created[i]))
	}
	slices.Sort(times)
	b := burst{p50: times[len(times)/2], max: times[len(times)-1], busy: busy, byComm: byComm}
	for i := range podStartupPods {
		if err := deletePod(ctx, ns, fmt.Sprintf("%s-%d", prefix, i)); err != nil {
			return b, err
		}
	}
	for {
		phases, err := podPhases(ctx, ns, "burst="+prefix)
		if err != nil {
			return b, err
		}
		if len(phases) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return b, fmt.Errorf("%d pods of burst %s not gone: %w", len(phases), prefix, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	// The kubelet removes a deleted pod's stopped sandbox (the runtime's
	// second DEL) in its container GC, about once a minute: in a later
	// burst, whose CPU it would take. Remove them now, so that every burst
	// starts on a settled node.
	for i := range podStartupPods {
		if err := c.Nodes[i%len(c.Nodes)].CollectSandboxes(ctx, uids[fmt.Sprintf("%s-%d", prefix, i)]); err != nil {
			return b, err
		}
	}
	return b, nil
}

// podPhases lists the pods of namespace ns matching selector: name → its
// phase and UID.
func podPhases(ctx context.Context, ns, selector string) (map[string]podState, error) {
	b, err := c.API(ctx, "GET", "/api/v1/namespaces/"+ns+"/pods?labelSelector="+selector, nil)
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name, UID string } `json:"metadata"`
			Status   struct{ Phase string }     `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, err
	}
	out := map[string]podState{}
	for _, p := range list.Items {
		out[p.Metadata.Name] = podState{Phase: p.Status.Phase, UID: p.Metadata.UID}
	}
	return out, nil
}

// podState is a pod's phase and UID (podPhases).
type podState struct{ Phase, UID string }

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on every Linux
// architecture Go builds for: proc(5)).
const userHZ = 100

// machineBusy is the CPU time the machine has spent not idle since boot,
// in seconds: /proc/stat's user, nice, system, irq, softirq and steal
// (proc_stat(5)).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var ticks float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		if i < len(f) {
			v, _ := strconv.ParseFloat(f[i], 64)
			ticks += v
		}
	}
	return ticks / userHZ
}

// reportedComms are the processes whose CPU time per burst goes into
// PODWIRE_K8S_PODSTARTUP_OUT: containerd (the CNI plugins it runs, podwire's
// ADDs among them, count as its children), the podwire agents, the shims
// (runc and the pods' processes), the kubelets and the API server.
var reportedComms = []string{"containerd", "podwire-agent", "containerd-shim", "kubelet", "kube-apiserver"}

// procCPU is the CPU time of every process, in seconds, by PID: user +
// system of the process and of its children it has waited for (so a CNI
// plugin's time shows in the runtime that ran it, runc's in its shim):
// proc_pid_stat(5), fields 14 to 17.
func procCPU() map[int]procTime {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	out := make(map[int]procTime, len(dirs))
	for _, d := range dirs {
		stat, err := os.ReadFile(d + "/stat")
		i := bytes.LastIndexByte(stat, ')')
		if err != nil || i < 0 {
			continue // gone since the glob
		}
		// comm, field 2, is in parentheses and may hold any byte: the
		// fields after the last ')' begin with field 3, the state.
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 15 {
			continue
		}
		var ticks float64
		for _, v := range f[11:15] {
			t, _ := strconv.ParseFloat(v, 64)
			ticks += t
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		open := bytes.IndexByte(stat, '(')
		out[pid] = procTime{comm: string(stat[open+1 : i]), cpu: ticks / userHZ}
	}
	return out
}

// procTime is one process's name and CPU time (procCPU).
type procTime struct {
	comm string
	cpu  float64
}

// commGroup is the name a process's time is summed under: a kernel worker
// names the work it runs now ("kworker/u8:2-writeback"), so all of them
// are one, "kworker".
func commGroup(comm string) string {
	if strings.HasPrefix(comm, "kworker/") {
		return "kworker"
	}
	return comm
}

// cpuByComm is the CPU time each process name spent between the snapshots
// before and after: a process in both counts its growth, a new one all
// of its time.
func cpuByComm(before, after map[int]procTime) map[string]float64 {
	out := map[string]float64{}
	for pid, a := range after {
		d := a.cpu
		if b, ok := before[pid]; ok && commGroup(b.comm) == commGroup(a.comm) {
			d -= b.cpu
		}
		if d > 0 {
			out[commGroup(a.comm)] += d
		}
	}
	return out
}

// TestCPUByComm: a process in both snapshots counts its growth, a new one
// all of its time, a kernel worker whose comm names another work item is
// the same process, and a reused PID under another name is a new process.
func TestCPUByComm(t *testing.T) {
	before := map[int]procTime{
		1: {"containerd", 10}, 2: {"kworker/u8:2-writeback", 50}, 3: {"podwire-agent", 1}, 4: {"bash", 7}, 9: {"gone", 3},
	}
	after := map[int]procTime{
		1: {"containerd", 12.5}, 2: {"kworker/u8:2-kvfree_rcu_reclaim", 50.25}, 3: {"podwire-agent", 1.5},
		4: {"runc", 0.5}, 5: {"kworker/0:1-events", 0.25},
	}
	got := cpuByComm(before, after)
	want := map[string]float64{"containerd": 2.5, "kworker": 0.5, "podwire-agent": 0.5, "runc": 0.5}
	if len(got) != len(want) {
		t.Fatalf("cpuByComm = %v, want %v", got, want)
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("cpuByComm[%q] = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
