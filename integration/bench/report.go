package main

import (
	"bufio"
	"debug/buildinfo"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// findings are the profiled causes of missed targets, written by hand
// (they need a person to read the profiles) and copied into the report.
//
//go:embed findings.md
var findings string

// report is everything the run measured.
type report struct {
	machine     []string
	sizes       [][2]string
	vlanOK      bool
	vlanReason  string
	vlanVM      *vlanVM // row G measured in the VM, or nil
	arms        []*arm
	lat         map[string]*opStats
	tablesE     []string
	direct      map[string]*directStats
	directOrder []string
	levels      []*levelStats
	growth      samples
	scaleNodes  []*node
	pps         []*ppsArm
	startup     []*startStats
	grace       *graceStats
	requests    *requestStats
	foreign     *foreignStats
	duration    time.Duration
	loadStart   string
	loadEnd     string
}

func kernel() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "unknown"
	}
	var sb strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func describeMachine(b *bench) []string {
	b.r.loadStart = loadavg()
	goPW := "unknown"
	if bi, err := buildinfo.ReadFile(b.podwireBin); err == nil {
		goPW = bi.GoVersion
	}
	rev := b.opt.rev
	if rev == "" {
		rev = "unknown"
	}
	return append([]string{
		"date: " + time.Now().UTC().Format("2006-01-02 15:04 MST"),
		fmt.Sprintf("CPUs (nproc): %d, %s", runtime.NumCPU(), procField("/proc/cpuinfo", "model name")),
		"memory: " + procField("/proc/meminfo", "MemTotal"),
		"kernel: " + kernel(),
		"Go: " + runtime.Version() + " (bench), " + goPW + " (bin/podwire)",
		"podwire revision: " + rev,
		"nft binary (portmap's nftables backend shells out to it): " + firstLine(runCmd("nft", "--version")),
	}, b.opt.notes...)
}

func firstLine(s string) string {
	if s == "" {
		return "not found"
	}
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func binarySizes(b *bench) [][2]string {
	var out [][2]string
	for _, p := range []string{b.podwireBin, filepath.Join(b.benchBin, "passthrough"),
		filepath.Join(b.cniBin, "ptp"), filepath.Join(b.cniBin, "host-local"),
		filepath.Join(b.cniBin, "tuning"), filepath.Join(b.cniBin, "portmap")} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		out = append(out, [2]string{filepath.Base(p), fmt.Sprintf("%.2f MiB (%d bytes)", float64(fi.Size())/(1<<20), fi.Size())})
	}
	return out
}

func holds(ok bool) string {
	if ok {
		return "holds"
	}
	return "**missed**"
}

func (r *report) markdown(b *bench) string {
	var w strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&w, f, a...) }
	p("# podwire benchmarks\n\n")
	p("Written by `make bench` (`scripts/bench.sh` runs `integration/bench`). The numbers are whatever the last run\n")
	p("gave on the machine below; no test asserts them. Targets are shown, never enforced.\n\n")
	p("## Machine\n\n")
	for _, m := range r.machine {
		p("- %s\n", m)
	}
	p("- load average at start: %s, at end: %s; run took %s\n", r.loadStart, r.loadEnd, r.duration.Round(time.Second))
	p("\n**Noise.** This machine is shared: other builds and tests ran during the run. Every comparison is\n")
	p("therefore interleaved round-robin: each round runs every arm once, starting from a different arm, so\n")
	p("the noise falls on every arm alike; %d warm-up rounds are discarded, then %d rounds are kept\n", b.opt.warmup, b.opt.rounds)
	p("(%d pods per arm). Differences of a millisecond or two are within the noise.\n\n", b.opt.rounds)

	p("## Method\n\n")
	p("- Every node is a network namespace of its own (`testns.Make`), with forwarding on, a veth uplink\n")
	p("  `eth0` holding the IPv4 and IPv6 default routes and the egress IPs; nothing runs in the host netns.\n")
	p("- ADD and DEL are timed around libcni's `AddNetworkList` / `DelNetworkList` (cniVersion 1.1.0), as a\n")
	p("  runtime calls them, called inside the node netns; each pod is ADDed then DELed at once.\n")
	p("- **IPv6 DAD is off in each pod netns** (`net.ipv6.conf.default.accept_dad=0` set before ADD), so ptp\n")
	p("  does not wait for its IPv6 address to settle; that wait (about a second) would swamp every difference.\n")
	p("  The node netns has DAD off as well.\n")
	p("- podwire's `stateDir` is on tmpfs (`/dev/shm`), as `/run/podwire` is on a real node (here `/run` is\n")
	p("  on disk); libcni's cache and host-local's leases are on disk, as on a node.\n")
	p("- podwire config: `sourceCheck: true`, `forwarding.namespaces: [\"nf-*\"]`, `probeSNAT.preset: azure`,\n")
	p("  `egress.ips: [%s, %s]` (assigned to the uplink), `logFile` set.\n", egressV4, egressV6)
	if len(r.tablesE) > 0 {
		p("  Tables podwire laid down on the arm E node: %s.\n", strings.Join(r.tablesE, ", "))
	}
	p("- Arm B's floor is `integration/bench/passthrough`: a static Go plugin that parses the config and\n")
	p("  prevResult and prints the result (exec + JSON, nothing else).\n")
	p("- portmap (arm D) runs with `\"backend\": \"nftables\"` and one port mapping per pod (the `portMappings`\n")
	p("  capability arg); its nftables backend shells out to `nft`.\n")
	p("- Added latency of a chained plugin is `p50(X) - p50(A)`; for I (a pod on a bridging primary,\n")
	p("  checked in `bridge podwire`) it is `p50(I) - p50(H)`, H being the bridge plugin alone.\n\n")

	p("## ADD and DEL latency per arm (ms)\n\n")
	p("Wall time, and (CPU columns) the user + system time of all plugin processes of the chain\n")
	p("(getrusage RUSAGE_CHILDREN around the call; less sensitive to the load of the machine than wall time).\n\n")
	p("| arm | chain | ADD p50 | ADD p90 | DEL p50 | DEL p90 | added ADD p50 | added DEL p50 | ADD CPU p50 | added ADD CPU | added DEL CPU |\n")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	base := r.lat["A"]
	for _, a := range r.arms {
		s := r.lat[a.key]
		addD, delD, addC, delC := "", "", "", ""
		if b, ok := r.lat[baseOf(a.key)]; ok && a.key != "A" && a.key != "H" {
			addD, delD = signedMs(s.add.p50()-b.add.p50()), signedMs(s.del.p50()-b.del.p50())
			addC, delC = signedMs(s.addCPU.p50()-b.addCPU.p50()), signedMs(s.delCPU.p50()-b.delCPU.p50())
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", a.key, a.label, ms(s.add.p50()), ms(s.add.p90()),
			ms(s.del.p50()), ms(s.del.p90()), addD, delD, ms(s.addCPU.p50()), addC, delC)
	}
	if !r.vlanOK {
		if v := r.vlanVM; v != nil && v.err == "" {
			p("| G | A + podwire, VLAN attachment | in the VM: see below | | | | | | | | |\n")
			p("\nG cannot run here (%s). It ran in the VM instead (`BenchmarkVLANAttachment`,\n", r.vlanReason)
			p("Debian's kernel under QEMU TCG, %d interleaved rounds), against an ordinary podwire pod of the same\n", v.rounds)
			p("VM run; under TCG only the ratio means anything:\n\n")
			p("| VM arm | ADD p50 | DEL p50 |\n| --- | ---: | ---: |\n")
			p("| ptp + podwire, ordinary pod | %.1f | %.1f |\n", v.ordAdd, v.ordDel)
			p("| ptp + podwire, VLAN attachment | %.1f | %.1f |\n", v.vlanAdd, v.vlanDel)
			p("| ratio VLAN / ordinary | %.2f | %.2f |\n", v.vlanAdd/v.ordAdd, v.vlanDel/v.ordDel)
		} else {
			p("| G | A + podwire, VLAN attachment | not run | | | | | | | | |\n")
			p("\nG not run: %s. The VLAN suite runs in a VM (`make test-vm`); a VLAN benchmark there would\n", r.vlanReason)
			p("time QEMU's emulated CPU, not podwire.\n")
			if v != nil {
				p("The VM's VLAN benchmark did not report: %s.\n", v.err)
			}
		}
	}
	added := func(k string) float64 {
		s, ok := r.lat[k]
		b, okb := r.lat[baseOf(k)]
		if ok && okb {
			return s.add.p50() - b.add.p50()
		}
		return 0
	}
	addedDel := func(k string) float64 {
		if s, ok := r.lat[k]; ok {
			return s.del.p50() - base.del.p50()
		}
		return 0
	}
	pw, floor, tun := added("E"), added("B"), added("C")
	addedCPU := func(k string) float64 {
		if s, ok := r.lat[k]; ok {
			return s.addCPU.p50() - base.addCPU.p50()
		}
		return 0
	}
	pwC, floorC, tunC := addedCPU("E"), addedCPU("B"), addedCPU("C")
	p("\nRatios of added ADD p50: podwire (E) / floor (B) = %s, podwire / tuning (C) = %s;\n", ratio(pw, floor), ratio(pw, tun))
	p("forwarding pod (F) / floor = %s; a pod on a bridging primary (I, against H) / routed (E) = %s.\n",
		ratio(added("F"), floor), ratio(added("I"), pw))
	p("Added DEL p50: podwire %s, floor %s, tuning %s, portmap %s.\n",
		signedMs(addedDel("E")), signedMs(addedDel("B")), signedMs(addedDel("C")), signedMs(addedDel("D")))
	p("The same ratios on CPU time: podwire / floor = %s, podwire / tuning = %s.\n\n", ratio(pwC, floorC), ratio(pwC, tunC))

	if len(r.direct) > 0 {
		p("## The plugin alone: wall time, CPU and page faults\n\n")
		p("Each binary run directly (os/exec, CNI_* environment, config with ptp's result as prevResult on stdin)\n")
		p("in the node netns, round-robin, %d runs each. Page faults are wait4's `ru_minflt` of the plugin process:\n", b.opt.rounds)
		p("each is at least one 4 KiB page the process touched for the first time, and on this machine each costs\n")
		p("tens of microseconds (\"Profiled causes\"). Peak RSS is not shown: `ru_maxrss` of a child that a Go\n")
		p("program spawns is the parent's (exec keeps the old mm's high-water mark, fs/exec.c `exec_mmap`:\n")
		p("`setmax_mm_hiwater_rss(&tsk->signal->maxrss, old_mm)`, and Go spawns with CLONE_VM).\n\n")
		p("| plugin | ADD p50 | ADD p90 | DEL p50 | DEL p90 | ADD CPU p50 | DEL CPU p50 | page faults ADD (median / max) | page faults DEL (median) |\n")
		p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, name := range r.directOrder {
			s := r.direct[name]
			mx := int64(0)
			for _, v := range s.faultsAdd {
				mx = max(mx, v)
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %d / %d | %d |\n", name, ms(s.add.p50()), ms(s.add.p90()),
				ms(s.del.p50()), ms(s.del.p90()), ms(s.addCPU.p50()), ms(s.delCPU.p50()), medianI(s.faultsAdd), mx, medianI(s.faultsDel))
		}
		p("\n")
	}

	if len(r.startup) > 0 {
		p("## Start-up (ms)\n\n")
		p("Each command run directly (fork, exec, wait), round-robin, %d runs each: the CNI VERSION verb needs no\n", len(r.startup[0].wall))
		p("config, netns or state, so it is the exec and package initialisation of the binary and one JSON line.\n")
		p("CPU is wait4's user + system time of the process. podwire links no k8s.io module (the node agent,\n")
		p("`cmd/podwire-agent`, is the only binary with client-go).\n\n")
		p("| command | wall p50 | wall p90 | CPU p50 | CPU p90 |\n| --- | ---: | ---: | ---: | ---: |\n")
		for _, st := range r.startup {
			p("| %s | %s | %s | %s | %s |\n", st.label, ms(st.wall.p50()), ms(st.wall.p90()), ms(st.cpu.p50()), ms(st.cpu.p90()))
		}
		p("\n")
	}

	if q := r.requests; q != nil {
		p("## An ADD's and a DEL's requests without the plugin (ms)\n\n")
		p("What an ordinary pod's ADD and DEL ask of the kernel, made by podwire's own packages from the running\n")
		p("bench (no exec, no package initialisation, no CNI config or result; %d rounds), in a netns of its own\n", len(q.add))
		p("holding arm E's tables: for ADD one nftables socket (`nft.Dial`), the verify of every table by content\n")
		p("(`nft.Ensure`, nothing to repair), the pod's elements in one batch and its record written on tmpfs\n")
		p("(%d nftables requests and batches); for DEL another socket, the elements deleted and the record\n", q.requests)
		p("removed. CPU is the bench process's user + system time. This is the part of podwire's added ADD that\n")
		p("no plugin process can shed while it verifies its tables by content on every ADD.\n\n")
		p("| verb | wall p50 | wall p90 | CPU p50 | CPU p90 |\n| --- | ---: | ---: | ---: | ---: |\n")
		p("| ADD | %s | %s | %s | %s |\n", ms(q.add.p50()), ms(q.add.p90()), ms(q.addCPU.p50()), ms(q.addCPU.p90()))
		p("| DEL | %s | %s | %s | %s |\n\n", ms(q.del.p50()), ms(q.del.p90()), ms(q.delCPU.p50()), ms(q.delCPU.p90()))
	}

	if g := r.grace; g != nil {
		p("## The kernel's grace period on delete (ms)\n\n")
		p("No podwire code: in a netns of its own, one nftables batch on a fresh netlink socket (google/nftables opens\n")
		p("and closes one per Flush, as a short-lived plugin does) adds one element to a set, then another batch\n")
		p("deletes it; %d rounds. nf_tables frees deleted elements after an RCU grace period\n", len(g.add))
		p("(`synchronize_rcu` on the commit path of the release), and closing the socket waits for it, so the\n")
		p("difference is wall time every DEL of an nftables plugin pays, whoever wrote it. CPU is the bench\n")
		p("thread's user + system time (RUSAGE_THREAD).\n\n")
		p("| batch | wall p50 | wall p90 | CPU p50 | CPU p90 |\n| --- | ---: | ---: | ---: | ---: |\n")
		p("| add one element | %s | %s | %s | %s |\n", ms(g.add.p50()), ms(g.add.p90()), ms(g.addCPU.p50()), ms(g.addCPU.p90()))
		p("| delete one element | %s | %s | %s | %s |\n", ms(g.del.p50()), ms(g.del.p90()), ms(g.delCPU.p50()), ms(g.delCPU.p90()))
		p("| delete - add (the grace period) | %s | | %s | |\n\n", signedMs(g.del.p50()-g.add.p50()), signedMs(g.delCPU.p50()-g.addCPU.p50()))
	}

	if f := r.foreign; f != nil && len(f.cleanE.add) > 0 {
		c, ru, e := f.shape.counts()
		p("## A clean node against one holding another owner's ruleset (ms)\n\n")
		p("The foreign node's netns holds `table ip kube-proxy`, shaped like kube-proxy's nftables proxier and\n")
		p("generated by the bench (`integration/bench/kubeproxy.go`): %d services with a service chain each (masquerade\n", f.shape.services)
		p("marks, a `numgen` verdict map over %d endpoint chains that DNAT), %d services without endpoints,\n", f.shape.endpoints, f.shape.idle)
		p("verdict maps from service IP . protocol . port and from node port, a cluster-IP set: %d chains, %d rules\n", c, ru)
		p("and %d set and map elements besides the base chains, loaded with `nft -f` in %s.\n", e, f.load.Round(time.Millisecond))
		p("Round-robin over the two nodes and, within a node, over ptp + host-local alone (A), the podwire chain\n")
		p("(E) and podwire run directly; %d rounds.\n\n", len(f.cleanE.add))
		p("| node | measured | ADD p50 | ADD p90 | DEL p50 | DEL p90 | ADD CPU p50 | DEL CPU p50 |\n")
		p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, row := range []struct {
			node, what string
			s          *opStats
		}{
			{"clean", "A: ptp + host-local", &f.cleanA}, {"foreign", "A: ptp + host-local", &f.foreignA},
			{"clean", "E: + podwire", &f.cleanE}, {"foreign", "E: + podwire", &f.foreignE},
			{"clean", "podwire alone", &f.cleanPW}, {"foreign", "podwire alone", &f.forPW},
		} {
			p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.node, row.what, ms(row.s.add.p50()), ms(row.s.add.p90()),
				ms(row.s.del.p50()), ms(row.s.del.p90()), ms(row.s.addCPU.p50()), ms(row.s.delCPU.p50()))
		}
		p("\n")
	}

	p("## Binary sizes\n\n| binary | size |\n| --- | ---: |\n")
	for _, s := range r.sizes {
		p("| %s | %s |\n", s[0], s[1])
	}
	p("\n")

	if len(r.levels) > 0 {
		p("## Scaling with existing podwire pods (ms, p50)\n\n")
		p("One node per level; the existing pods were made through the real chain (ptp + host-local + podwire).\n")
		p("Round-robin over the levels and, within a level, over: ptp + host-local alone (A), the podwire chain\n")
		p("(E), the podwire chain right after every podwire table was deleted from the node (first invocation:\n")
		p("the tables are rebuilt and every recorded pod's elements re-added), and podwire run directly, steady\n")
		p("and right after the tables were deleted (the first invocation without ptp and host-local, whose\n")
		p("cost at 1000 pods varies by tens of milliseconds from run to run).\n\n")
		p("| existing pods | A ADD | E ADD | E-A ADD | A DEL | E DEL | E-A DEL | podwire alone ADD (CPU) | podwire alone DEL (CPU) | first-invocation ADD | first - steady (CPU) | podwire alone: first - steady (CPU) |\n")
		p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, l := range r.levels {
			p("| %d | %s | %s | %s | %s | %s | %s | %s (%s) | %s (%s) | %s | %s (%s) | %s (%s) |\n", l.existing, ms(l.a.add.p50()), ms(l.e.add.p50()),
				signedMs(l.e.add.p50()-l.a.add.p50()), ms(l.a.del.p50()), ms(l.e.del.p50()), signedMs(l.e.del.p50()-l.a.del.p50()),
				ms(l.pw.add.p50()), ms(l.pw.addCPU.p50()), ms(l.pw.del.p50()), ms(l.pw.delCPU.p50()),
				ms(l.first.add.p50()), signedMs(l.first.add.p50()-l.e.add.p50()), signedMs(l.first.addCPU.p50()-l.e.addCPU.p50()),
				signedMs(l.firstPW.add.p50()-l.pw.add.p50()), signedMs(l.firstPW.addCPU.p50()-l.pw.addCPU.p50()))
		}
		p("\n")
		p("p90 of the same runs (ms):\n\n")
		p("| existing pods | E ADD p90 | E DEL p90 | podwire alone ADD p90 (CPU) | podwire alone DEL p90 (CPU) | first-invocation ADD p90 |\n")
		p("| ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, l := range r.levels {
			p("| %d | %s | %s | %s (%s) | %s (%s) | %s |\n", l.existing, ms(l.e.add.p90()), ms(l.e.del.p90()),
				ms(l.pw.add.p90()), ms(l.pw.addCPU.p90()), ms(l.pw.del.p90()), ms(l.pw.delCPU.p90()), ms(l.first.add.p90()))
		}
		p("\n")
		p("What finding the uplink and checking the egress IPs would cost by dumps, timed by the bench in each\n")
		p("node (median of %d, ms): a full IPv6 route dump, IPv4 and IPv6 address dumps (what podwire did on\n", dumpReps)
		p("every ADD before b87a334), against the one RTM_GETROUTE with RTM_F_FIB_MATCH it does now.\n\n")
		p("| existing pods | IPv6 routes | route dump | IPv4/IPv6 addresses | addr dump v4 | addr dump v6 | FIB-match get (dev) |\n")
		p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, l := range r.levels {
			if d := l.dumps; d != nil {
				p("| %d | %d | %.2f | %d / %d | %.2f | %.2f | %.3f (%s) |\n", l.existing, d.routeCount, d.routes6,
					d.addrCount4, d.addrCount6, d.addrs4, d.addrs6, d.fibMatch6, d.fibDev)
			}
		}
		p("\n")
		if len(r.growth) >= 200 {
			p("ADD latency of the podwire chain while the existing pods were made (p50 per %d pods, ms): ", len(r.growth)/10)
			step := len(r.growth) / 10
			var parts []string
			for i := 0; i+step <= len(r.growth); i += step {
				parts = append(parts, fmt.Sprintf("%d: %s", i+step, ms(r.growth[i:i+step].p50())))
			}
			p("%s.\n\n", strings.Join(parts, ", "))
		}
	}

	if len(r.pps) > 0 {
		p("## Throughput through the source check\n\n")
		p("A UDP stream (%d-byte payloads, sendmmsg/recvmmsg batches of %d, Go sockets) from one pod to\n", blastPayload, blastBatch)
		p("another through the node, %.1f s per burst after %s of warm-up, %d bursts per arm round-robin;\n", b.opt.ppsSeconds, blastWarm, b.opt.ppsBursts)
		p("median of the bursts. On the smallest and the biggest scaling node, two podwire pods (every packet\n")
		p("goes through the source check: interface lookup, then `iifname . saddr` lookup) and, as a reference,\n")
		p("two pods of ptp alone on the same node (their host interfaces are not checked: one lookup); then the\n")
		p("same on a bridging primary (the bridge plugin on cni0, pod to pod across the bridge, never the IP layer):\n")
		p("two pods checked in `bridge podwire` (on the biggest node beside as many other pods' elements) and two\n")
		p("bridge pods that are not checked.\n")
		p("On 2 CPUs the sender and the receiver compete with each other and with the other work on the machine.\n\n")
		p("| pods on the node | stream between | received pps | sent pps |\n| ---: | --- | ---: | ---: |\n")
		for _, a := range r.pps {
			p("| %d | %s | %.0f | %.0f |\n", a.pods, a.label, medianF(a.rx), medianF(a.tx))
		}
		p("\n")
	}

	p("## Targets (shown, not asserted)\n\n")
	p("Wall-time rows are as measured; on a loaded machine the CPU-time rows are the ones to trust (see\n")
	p("\"Profiled causes\" below). The chain rows include ptp + host-local, whose own cost grows with the\n")
	p("leases of the network; the \"podwire alone\" and E-A rows are podwire's share.\n\n")
	p("| target | figure | verdict |\n| --- | --- | --- |\n")
	if b.opt.phase("latency") {
		p("| podwire's added ADD p50 <= 2x the floor's | %s vs 2 x %s ms | %s |\n", signedMs(pw), ms(floor), holds(pw <= 2*floor))
		p("| podwire's added ADD p50 <= tuning's | %s vs %s ms | %s |\n", signedMs(pw), signedMs(tun), holds(pw <= tun))
		p("| same on CPU time: <= 2x floor | %s vs 2 x %s ms | %s |\n", signedMs(pwC), ms(floorC), holds(pwC <= 2*floorC))
		p("| same on CPU time: <= tuning | %s vs %s ms | %s |\n", signedMs(pwC), signedMs(tunC), holds(pwC <= tunC))
		if q := r.requests; q != nil {
			p("| (context) an ADD's requests without the plugin, CPU, against what tuning adds over the floor | %s vs %s ms | |\n",
				ms(q.addCPU.p50()), signedMs(tunC-floorC))
		}
	}
	if len(r.levels) >= 2 {
		l0, lN := r.levels[0], r.levels[len(r.levels)-1]
		for _, t := range []struct {
			name   string
			v0, vN float64
		}{
			{"chain ADD p50", l0.e.add.p50(), lN.e.add.p50()},
			{"chain DEL p50", l0.e.del.p50(), lN.e.del.p50()},
			{"podwire's added ADD p50 (E-A)", l0.e.add.p50() - l0.a.add.p50(), lN.e.add.p50() - lN.a.add.p50()},
			{"podwire's added DEL p50 (E-A)", l0.e.del.p50() - l0.a.del.p50(), lN.e.del.p50() - lN.a.del.p50()},
			{"podwire alone ADD p50", l0.pw.add.p50(), lN.pw.add.p50()},
			{"podwire alone DEL p50", l0.pw.del.p50(), lN.pw.del.p50()},
			{"podwire alone ADD CPU p50", l0.pw.addCPU.p50(), lN.pw.addCPU.p50()},
			{"podwire alone DEL CPU p50", l0.pw.delCPU.p50(), lN.pw.delCPU.p50()},
		} {
			p("| %s at %d pods within 10%% of %d pods | %s vs %s ms (%+.0f%%) | %s |\n", t.name, lN.existing, l0.existing,
				ms(t.vN), ms(t.v0), 100*(t.vN/t.v0-1), holds(t.vN <= 1.1*t.v0))
		}
		first := l0.first.add.p50() - l0.e.add.p50()
		p("| first invocation < 50 ms above steady state (%d pods) | %s ms | %s |\n", l0.existing, signedMs(first), holds(first < 50))
		firstN := lN.first.add.p50() - lN.e.add.p50()
		p("| first invocation < 50 ms above steady state (%d pods) | %s ms | %s |\n", lN.existing, signedMs(firstN), holds(firstN < 50))
		firstPW := lN.firstPW.add.p50() - lN.pw.add.p50()
		p("| same, podwire run directly (%d pods) | %s ms (CPU %s ms) | %s |\n", lN.existing, signedMs(firstPW),
			signedMs(lN.firstPW.addCPU.p50()-lN.pw.addCPU.p50()), holds(firstPW < 50))
	}
	within := func(name string, v0, v1 float64, what0, what1 string) {
		p("| %s: %s within 10%% of %s | %s vs %s ms (%+.0f%%) | %s |\n", name, what1, what0, ms(v1), ms(v0), 100*(v1/v0-1), holds(v1 <= 1.1*v0))
	}
	if f := r.foreign; f != nil && len(f.cleanE.add) > 0 {
		for _, t := range []struct {
			name   string
			v0, v1 float64
		}{
			{"chain ADD p50 (E)", f.cleanE.add.p50(), f.foreignE.add.p50()},
			{"chain DEL p50 (E)", f.cleanE.del.p50(), f.foreignE.del.p50()},
			{"podwire alone ADD p50", f.cleanPW.add.p50(), f.forPW.add.p50()},
			{"podwire alone DEL p50", f.cleanPW.del.p50(), f.forPW.del.p50()},
			{"podwire alone ADD CPU p50", f.cleanPW.addCPU.p50(), f.forPW.addCPU.p50()},
			{"podwire alone DEL CPU p50", f.cleanPW.delCPU.p50(), f.forPW.delCPU.p50()},
		} {
			within(t.name, t.v0, t.v1, "the clean node", "the foreign-ruleset node")
		}
	}
	var pwStart, minStart *startStats
	for _, st := range r.startup {
		if st.isPodwire {
			pwStart = st
		}
		if st.isMinimal {
			minStart = st
		}
	}
	if pwStart != nil && minStart != nil {
		p("| start-up (CNI VERSION) wall p50 <= 1.5x the minimal static Go plugin | %s vs 1.5 x %s ms (%s) | %s |\n", ms(pwStart.wall.p50()),
			ms(minStart.wall.p50()), ratio(pwStart.wall.p50(), minStart.wall.p50()), holds(pwStart.wall.p50() <= 1.5*minStart.wall.p50()))
		p("| start-up CPU p50 <= 1.5x the minimal static Go plugin | %s vs 1.5 x %s ms (%s) | %s |\n", ms(pwStart.cpu.p50()),
			ms(minStart.cpu.p50()), ratio(pwStart.cpu.p50(), minStart.cpu.p50()), holds(pwStart.cpu.p50() <= 1.5*minStart.cpu.p50()))
	}
	if g := r.grace; g != nil && len(r.levels) > 0 {
		l0 := r.levels[0]
		p("| (context) podwire alone DEL p50 at %d pods, of which the kernel's grace period | %s ms, %s ms | |\n", l0.existing,
			ms(l0.pw.del.p50()), signedMs(g.del.p50()-g.add.p50()))
	}
	if len(r.pps) >= 4 {
		s, g := medianF(r.pps[1].rx), medianF(r.pps[3].rx)
		p("| throughput through the check at %d pods >= 95%% of %d | %.0f vs %.0f pps (%.0f%%) | %s |\n", r.pps[3].pods, r.pps[1].pods,
			g, s, 100*g/s, holds(g >= 0.95*s))
		us, ug := medianF(r.pps[0].rx), medianF(r.pps[2].rx)
		p("| same, unchecked ptp pods on the same nodes (reference) | %.0f vs %.0f pps (%.0f%%) | |\n", ug, us, 100*ug/us)
	}
	if len(r.pps) == 8 {
		// The check's own cost is what must not grow with the pods: each
		// node's checked pair against its unchecked pair (the control,
		// which carries whatever else a node of that size costs).
		us, s, ug, g := medianF(r.pps[4].rx), medianF(r.pps[5].rx), medianF(r.pps[6].rx), medianF(r.pps[7].rx)
		small, big := s/us, g/ug
		p("| throughput through the bridge check, as a share of unchecked bridge pods on the same node: at %d pods >= at %d minus 5 points | %.0f%% vs %.0f%% (%.0f / %.0f vs %.0f / %.0f pps) | %s |\n",
			r.pps[7].pods, r.pps[5].pods, 100*big, 100*small, g, ug, s, us, holds(big >= small-0.05))
	}
	p("\nReference anchors measured on this kind of machine earlier: floor +1.7 ms, tuning +3.0 ms, portmap\n")
	p("(nftables) +32 ms ADD and +60 ms DEL, growing about 0.1 ms per existing pod.\n")

	p("\n%s", findings)

	var st []*levelStats
	for _, l := range r.levels {
		if l.straceAdd != "" {
			st = append(st, l)
		}
	}
	if len(st) > 0 {
		p("\n## Syscall profile of podwire (`strace -f -c`, one ADD and one DEL per level)\n\n")
		for _, l := range st {
			p("### %d existing pods, ADD\n\n```\n%s```\n\n### %d existing pods, DEL\n\n```\n%s```\n\n",
				l.existing, topLines(l.straceAdd, 14), l.existing, topLines(l.straceDel, 14))
		}
	}
	return w.String()
}

// topLines keeps the header, the first n syscall lines and the total of a
// strace -c summary.
func topLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	var out []string
	body := 0
	for i, l := range lines {
		switch {
		case i < 2, strings.HasPrefix(l, "------"), strings.Contains(l, "total"):
			out = append(out, l)
		case body < n:
			out = append(out, l)
			body++
		}
	}
	return strings.Join(out, "\n") + "\n"
}
