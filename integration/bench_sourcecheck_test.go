package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/internal/testns"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
)

// The source-check benchmarks. Run with
//
//	go -C integration test -run '^$' -bench SourceCheck -benchtime 7x .
//
// BenchmarkSourceCheckPPS reports packets per second from a pod through the
// node with 1 and with 1000 pods' elements in the sets, interleaved, and
// their ratio (pps-1000/pps-1, want >= 0.95: no per-pod rule).
// BenchmarkSourceCheckADD reports podwire's own ADD latency (the binary
// alone, with ptp's prevResult) with 0 and 1000 existing pods (records and
// elements).

// benchExtraPods is how many pods' elements are added besides the real one.
const benchExtraPods = 999

// benchNetwork is the bench chain's name, which the fake pods' records
// carry too.
const benchNetwork = "podwire-bench"

// newBenchNode is a node whose chain is named benchNetwork.
func newBenchNode(b *testing.B) *node {
	n := newNode(b)
	n.Base.Name = benchNetwork
	return n
}

// ptpList is n's chain without podwire: ptp + host-local alone.
func ptpList(b *testing.B, n *node) *libcni.NetworkConfigList {
	c := n.Chain("1.1.0", nil)
	c.Plugins = nil
	l, err := c.List()
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func benchRuntimeConf(netnsPath string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: randHex(32), NetNS: netnsPath, IfName: "eth0",
		Args:           [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "bench"}, {"K8S_POD_NAME", "p-" + randHex(4)}},
		CapabilityArgs: map[string]any{"io.kubernetes.cri.pod-annotations": nil},
	}
}

// fakePods are the elements and records of n pods that exist only in
// podwire's sets and state (host interfaces "bench0001"...).
func fakePods(n int) (nft.Elements, []*state.Record) {
	e := nft.Elements{}
	var recs []*state.Record
	for i := 1; i <= n; i++ {
		r := &state.Record{
			ContainerID: fmt.Sprintf("bench%060d", i), IfName: "eth0", Network: benchNetwork,
			PodNamespace: "bench", PodName: fmt.Sprintf("fake-%d", i), Complete: true, SourceCheck: true,
			HostIfName: fmt.Sprintf("bench%04d", i),
			Addresses: []netip.Addr{
				netip.AddrFrom4([4]byte{10, 250 + byte(i>>16), byte(i >> 8), byte(i)}),
				netip.MustParseAddr(fmt.Sprintf("fd00:250::%x", i)),
			},
		}
		recs = append(recs, r)
		e.Merge(sourcecheck.Elements(sourcecheck.Pod{HostIfName: r.HostIfName, Addresses: r.Addresses, Name: r.PodNamespace + "/" + r.PodName}))
	}
	return e, recs
}

// BenchmarkSourceCheckPPS: UDP from a checked pod through the node to a
// backend, counted at the backend's interface, in interleaved phases with 1
// and 1000 pods' elements in the sets.
func BenchmarkSourceCheckPPS(b *testing.B) {
	for _, v6 := range []bool{false, true} {
		b.Run(famName(v6), func(b *testing.B) {
			n := newBenchNode(b)
			be := newBackendFor(b, n.NS)
			podNS := testns.New(b)
			list, rt := n.conflist("1.1.0", nil), benchRuntimeConf(podNS.Path())
			if _, err := n.Client().Add(list, rt); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = n.Client().Del(list, rt) })
			dst := netip.AddrPortFrom(be.v4, 9000)
			if v6 {
				dst = netip.AddrPortFrom(be.v6, 9000)
			}
			stopRecv := udpSink(b, be.ns, dst)
			defer stopRecv()
			senders := udpSenders(b, podNS, dst, 1)
			extra, _ := fakePods(benchExtraPods)
			c := n.nftConn()

			// Warm up: the pod's IPv6 address may still be tentative (DAD).
			for i := 0; measurePPS(b, be.ns, senders, 100*time.Millisecond) < 1000; i++ {
				if i > 50 {
					b.Fatal("no packets reach the backend")
				}
			}
			rounds := max(b.N, 5)
			var one, many []float64
			b.ResetTimer()
			for r := 0; r < rounds; r++ {
				one = append(one, measurePPS(b, be.ns, senders, 400*time.Millisecond))
				addElements(b, c, extra)
				if r == 0 {
					checkElementCount(b, c, benchExtraPods+1)
				}
				many = append(many, measurePPS(b, be.ns, senders, 400*time.Millisecond))
				deleteElements(b, c, extra)
			}
			b.StopTimer()
			p1, _ := reportMedians(b, one, many, "pps-1pod", "pps-1000pods", "ratio")
			b.Logf("%s: %d rounds, pps with 1 pod %v, with 1000 pods %v", famName(v6), rounds, one, many)
			if p1 == 0 {
				b.Fatal("no packet reached the backend")
			}
		})
	}
}

// checkElementCount verifies that the checked set holds n interfaces.
func checkElementCount(b *testing.B, c *nftables.Conn, n int) {
	s, err := c.GetSetByName(&nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire"}, "checked")
	if err != nil {
		b.Fatal(err)
	}
	els, err := c.GetSetElements(s)
	if err != nil {
		b.Fatal(err)
	}
	if len(els) != n {
		b.Fatalf("checked set has %d elements, want %d", len(els), n)
	}
}

// udpSink is a UDP socket bound to dst inside netns.
func udpSink(b *testing.B, netns ns.NetNS, dst netip.AddrPort) func() {
	var pc net.PacketConn
	if err := netns.Do(func(ns.NetNS) error {
		var err error
		pc, err = net.ListenPacket("udp", dst.String())
		return err
	}); err != nil {
		b.Fatal(err)
	}
	// Never read: the datagrams are counted at the interface, and a full
	// socket buffer drops them without an ICMP error going back.
	return func() { pc.Close() }
}

// udpSenders are n UDP sockets of netns connected to dst.
func udpSenders(b *testing.B, netns ns.NetNS, dst netip.AddrPort, n int) []net.Conn {
	var out []net.Conn
	if err := netns.Do(func(ns.NetNS) error {
		for range n {
			c, err := net.Dial("udp", dst.String())
			if err != nil {
				return err
			}
			out = append(out, c)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, c := range out {
			c.Close()
		}
	})
	return out
}

// measurePPS blasts 64-byte datagrams from every sender for d and returns
// the packets per second the backend's interface received.
func measurePPS(b *testing.B, backendNS ns.NetNS, senders []net.Conn, d time.Duration) float64 {
	before := rxPackets(b, backendNS)
	var stop atomic.Bool
	var wg sync.WaitGroup
	payload := make([]byte, 64)
	start := time.Now()
	for _, c := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				_, _ = c.Write(payload)
			}
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	time.Sleep(50 * time.Millisecond) // let the last packets land
	return float64(rxPackets(b, backendNS)-before) / elapsed.Seconds()
}

func rxPackets(b *testing.B, netns ns.NetNS) uint64 {
	var n uint64
	if err := netns.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName("eth0")
		if err != nil {
			return err
		}
		n = l.Attrs().Statistics.RxPackets
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return n
}

// chunked calls f with the elements of e in batches of at most 200 per set:
// one netlink batch of thousands of elements exceeds the socket's send
// buffer.
func chunked(e nft.Elements, f func(nft.Elements) error) error {
	const size = 200
	for id, sets := range e {
		for name, elems := range sets {
			for i := 0; i < len(elems); i += size {
				part := nft.Elements{}
				part.Add(id, name, elems[i:min(i+size, len(elems))]...)
				if err := f(part); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// addElements adds e to the source check's sets (chunked).
func addElements(b *testing.B, c *nftables.Conn, e nft.Elements) {
	tables := []*nft.Table{sourcecheck.Table()}
	if err := chunked(e, func(part nft.Elements) error { return nft.AddElements(c, tables, part) }); err != nil {
		b.Fatal(err)
	}
}

// deleteElements deletes e from the source check's sets (chunked).
func deleteElements(b *testing.B, c *nftables.Conn, e nft.Elements) {
	if err := chunked(e, func(part nft.Elements) error { return nft.DeleteElements(c, part) }); err != nil {
		b.Fatal(err)
	}
}

// reportMedians reports the medians of the samples without and with the
// extra pods as the metrics unit0 and unit1, and the second over the first
// as ratioUnit; it returns both medians.
func reportMedians(b *testing.B, without, with []float64, unit0, unit1, ratioUnit string) (m0, m1 float64) {
	m0, m1 = median(without), median(with)
	b.ReportMetric(m0, unit0)
	b.ReportMetric(m1, unit1)
	b.ReportMetric(m1/m0, ratioUnit)
	return m0, m1
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// BenchmarkSourceCheckADD times podwire's own ADD (after an untimed ptp ADD
// that gives the prevResult; an untimed DEL of both after), interleaving
// rounds with 0 and with 1000 existing pods' records and elements on the
// node, and reports the median of each and their ratio (want ~1: ADD reads
// one chain dump, never the sets or the other records).
func BenchmarkSourceCheckADD(b *testing.B) {
	n := newBenchNode(b)
	podNS := testns.New(b)
	ptp := ptpList(b, n)
	// cycle returns the wall time of podwire's ADD and its CPU time (user +
	// system, from the children's rusage), which a loaded machine disturbs
	// less.
	cycle := func() (time.Duration, time.Duration) {
		rt := benchRuntimeConf(podNS.Path())
		var stdin []byte
		var took, cpu time.Duration
		err := n.NS.Do(func(ns.NetNS) error {
			res, err := n.CNI.AddNetworkList(context.Background(), ptp, rt)
			if err != nil {
				return err
			}
			conf := cnitest.PodwireEntry(n.StateDir(), n.LogFile(), nil)
			conf["cniVersion"], conf["name"], conf["prevResult"] = "1.1.0", benchNetwork, res
			conf["runtimeConfig"] = map[string]any{"io.kubernetes.cri.pod-annotations": nil}
			if stdin, err = json.Marshal(conf); err != nil {
				return err
			}
			args := func(cmd string) *invoke.Args {
				return &invoke.Args{Command: cmd, ContainerID: rt.ContainerID, NetNS: rt.NetNS, IfName: rt.IfName,
					PluginArgs: rt.Args, Path: filepath.Dir(podwireBin)}
			}
			before := childrenCPU()
			start := time.Now()
			_, err = invoke.ExecPluginWithResult(context.Background(), podwireBin, stdin, args("ADD"), nil)
			took = time.Since(start)
			cpu = childrenCPU() - before
			if err != nil {
				return fmt.Errorf("podwire ADD: %w", err)
			}
			if err := invoke.ExecPluginWithoutResult(context.Background(), podwireBin, stdin, args("DEL"), nil); err != nil {
				return fmt.Errorf("podwire DEL: %w", err)
			}
			return n.CNI.DelNetworkList(context.Background(), ptp, rt)
		})
		if err != nil {
			b.Fatal(err)
		}
		return took, cpu
	}
	cycle() // lays the tables down
	extra, recs := fakePods(1000)
	store := state.New(n.StateDir())
	c := n.nftConn()
	const perPhase = 5
	rounds := max(b.N, 3)
	var at0, at1000, cpu0, cpu1000 []float64
	sample := func(wall, cpu *[]float64) {
		w, c := cycle()
		*wall = append(*wall, float64(w.Microseconds())/1000)
		*cpu = append(*cpu, float64(c.Microseconds())/1000)
	}
	b.ResetTimer()
	for range rounds {
		for range perPhase {
			sample(&at0, &cpu0)
		}
		for _, r := range recs {
			if err := store.Put(r); err != nil {
				b.Fatal(err)
			}
		}
		addElements(b, c, extra)
		for range perPhase {
			sample(&at1000, &cpu1000)
		}
		checkElementCount(b, c, 1000)
		for _, r := range recs {
			if err := store.Delete(r.ContainerID, r.IfName); err != nil {
				b.Fatal(err)
			}
		}
		deleteElements(b, c, extra)
	}
	b.StopTimer()
	reportMedians(b, at0, at1000, "ms/ADD-0pods", "ms/ADD-1000pods", "ratio")
	reportMedians(b, cpu0, cpu1000, "cpu-ms/ADD-0pods", "cpu-ms/ADD-1000pods", "cpu-ratio")
	b.Logf("ADD wall ms with 0 pods %v; with 1000 pods %v", at0, at1000)
	b.Logf("ADD CPU ms with 0 pods %v; with 1000 pods %v", cpu0, cpu1000)
}

// childrenCPU is the user + system time of this process's waited-for
// children.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
