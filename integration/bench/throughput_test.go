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

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/sourcecheck"
)

const (
	blastPayload = 64 // bytes of UDP payload: small packets stress the per-packet path
	blastBatch   = 64 // messages per sendmmsg/recvmmsg
	blastWarm    = 100 * time.Millisecond
	blastBurst   = 250 * time.Millisecond
)

// BenchmarkThroughput streams UDP between two pods through the node, on the
// smallest and the biggest level, for pairs of ptp pods ("ptp"), podwire
// pods ("podwire", source-checked), bridge pods on cni0 ("bridge") and
// podwire pods on it ("bridgecheck", checked in `bridge podwire` beside as
// many other pods' elements on the biggest): "<pair>@<level>-rx-pps".
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
		bridged := func(key string) *arm { return newArm(b, key, l.n, 80+i, "bench-I") }
		for k, a := range []*arm{l.a, l.e, bridged("H"), bridged("I")} {
			name := []string{"ptp", "podwire", "bridge", "bridgecheck"}[k] + "@" + l.name
			pairs = append(pairs, pair{name, l.n.keep(b, a, 900001+2*k), l.n.keep(b, a, 900002+2*k)})
		}
		if i == idx[len(idx)-1] && l.pods > 0 {
			// The set sizes of a node with as many pods on its bridge: a
			// port and two addresses each, with no port behind them.
			e := nft.Elements{}
			for j := range l.pods {
				sourcecheck.AddElements(e, sourcecheck.Pod{HostIfName: fmt.Sprintf("vethfk%08x", j), Bridged: true,
					Name: fmt.Sprintf("bench/fake-%d", j), Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, 251, byte(j >> 8), byte(j)}),
						netip.MustParseAddr(fmt.Sprintf("fd00:251::%x", j))}})
			}
			err := withConn(l.n.NS, func(c nft.Conn) error { return nft.AddElements(c, []*nft.Table{sourcecheck.BridgeTable()}, e) })
			if err != nil {
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

// blast sends UDP from pod s to pod r for blastBurst, after blastWarm: the
// packets per second received and sent. Each socket is made in its pod's
// netns and used from any thread.
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
