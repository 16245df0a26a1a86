package bench

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/ipv4"
)

const (
	blastPayload = 64 // bytes of UDP payload: small packets stress the per-packet path
	blastBatch   = 64 // messages per sendmmsg/recvmmsg
	blastWarm    = 100 * time.Millisecond
	blastBurst   = 250 * time.Millisecond
)

// BenchmarkThroughput streams UDP from one pod to another through the node,
// round-robin over the smallest and the biggest BENCH_LEVELS node and, on
// each, over pairs of pods: ptp pods not checked ("ptp"), podwire pods
// (every packet through the source check, "podwire"), bridge pods on cni0
// not checked ("bridge") and podwire pods on the bridge, checked in
// `bridge podwire` ("bridgecheck"; on the biggest node beside as many other
// pods' elements). A round is one burst per pair; "<pair>@<level>-rx-pps"
// is the median of the received rates.
func BenchmarkThroughput(b *testing.B) {
	levels := envInts(b, "BENCH_LEVELS", "0,100,1000")
	idx := slices.Compact([]int{0, len(levels) - 1})
	type pair struct {
		name string
		s, r *pod
	}
	var pairs []pair
	for _, i := range idx {
		l := levelNode(b, i, levels[i])
		bridged := func(key string) *arm { return newArm(b, key, l.n, l.sub+10, "bench-I") }
		for k, a := range []*arm{l.a, l.e, bridged("H"), bridged("I")} {
			name := []string{"ptp", "podwire", "bridge", "bridgecheck"}[k] + "@" + l.name
			pairs = append(pairs, pair{name, l.n.keep(b, a, 900001+2*k), l.n.keep(b, a, 900002+2*k)})
		}
		if i == idx[len(idx)-1] && l.pods > 0 {
			if err := l.n.fakeBridgedPods(l.pods); err != nil {
				b.Fatal(err)
			}
		}
	}
	rounds(b, len(pairs), func(r, i int, s samples) error {
		p := pairs[i]
		rx, tx, err := blast(p.s, p.r)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		s[p.name+"-rx-pps"] = append(s[p.name+"-rx-pps"], rx)
		s[p.name+"-tx-pps"] = append(s[p.name+"-tx-pps"], tx)
		return nil
	})
}

// blast sends a UDP stream from pod s to pod r through the node for
// blastBurst (after blastWarm) and returns the packets per second received
// and sent. The sockets are made in their pod's netns and used from any
// thread.
func blast(s, r *pod) (rx, tx float64, err error) {
	v4, _ := r.Addrs()
	if !v4.IsValid() {
		return 0, 0, fmt.Errorf("pod %s has no IPv4 address", r.RT.ContainerID)
	}
	var rc, sc *net.UDPConn
	err = r.NS.Do(func(ns.NetNS) (err error) { rc, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 9999}); return err })
	if err != nil {
		return 0, 0, err
	}
	defer rc.Close()
	_ = rc.SetReadBuffer(8 << 20)
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(v4, 9999))
	if err = s.NS.Do(func(ns.NetNS) (err error) { sc, err = net.DialUDP("udp4", nil, dst); return err }); err != nil {
		return 0, 0, err
	}
	defer sc.Close()
	var received, sent atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	loop := func(c *net.UDPConn, size int, count *atomic.Int64, io func(*ipv4.PacketConn, []ipv4.Message) (int, error)) {
		defer wg.Done()
		pc, msgs := ipv4.NewPacketConn(c), make([]ipv4.Message, blastBatch)
		for i := range msgs {
			msgs[i].Buffers = [][]byte{make([]byte, size)}
		}
		for !stop.Load() {
			if n, err := io(pc, msgs); err == nil {
				count.Add(int64(n))
			}
		}
	}
	wg.Add(2)
	go loop(rc, 2048, &received, func(pc *ipv4.PacketConn, m []ipv4.Message) (int, error) {
		_ = rc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		return pc.ReadBatch(m, 0)
	})
	go loop(sc, blastPayload, &sent, func(pc *ipv4.PacketConn, m []ipv4.Message) (int, error) { return pc.WriteBatch(m, 0) })
	time.Sleep(blastWarm)
	r0, s0, t0 := received.Load(), sent.Load(), time.Now()
	time.Sleep(blastBurst)
	r1, s1, el := received.Load(), sent.Load(), time.Since(t0).Seconds()
	stop.Store(true)
	wg.Wait()
	if r1 == r0 {
		return 0, 0, fmt.Errorf("no packet reached %s", v4)
	}
	return float64(r1-r0) / el, float64(s1-s0) / el, nil
}
