package main

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/ipv4"
)

const (
	blastPort    = 9999
	blastPayload = 64 // bytes of UDP payload: small packets stress the per-packet path
	blastBatch   = 64 // messages per sendmmsg/recvmmsg
	blastWarm    = 250 * time.Millisecond
)

// podV4 is the pod's IPv4 address from its result.
func podV4(p *pod) (net.IP, error) {
	for _, ip := range p.result.IPs {
		if v4 := ip.Address.IP.To4(); v4 != nil {
			return v4, nil
		}
	}
	return nil, fmt.Errorf("pod %s has no IPv4 address", p.rt.ContainerID)
}

// blast sends a bounded UDP stream from pod s to pod r through the node for
// d (after a warm-up) and returns the packets per second received and sent.
// Both sockets are made inside their pod's netns and used from any thread.
func blast(s, r *pod, d time.Duration) (rx, tx float64, err error) {
	dst, err := podV4(r)
	if err != nil {
		return 0, 0, err
	}
	var rc, sc *net.UDPConn
	if err := r.ns.Do(func(ns.NetNS) error {
		rc, err = net.ListenUDP("udp4", &net.UDPAddr{Port: blastPort})
		return err
	}); err != nil {
		return 0, 0, fmt.Errorf("receiver socket: %w", err)
	}
	defer rc.Close()
	_ = rc.SetReadBuffer(8 << 20)
	if err := s.ns.Do(func(ns.NetNS) error {
		sc, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: dst, Port: blastPort})
		return err
	}); err != nil {
		return 0, 0, fmt.Errorf("sender socket: %w", err)
	}
	defer sc.Close()

	var received, sent atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // receiver
		defer wg.Done()
		pc := ipv4.NewPacketConn(rc)
		msgs := make([]ipv4.Message, blastBatch)
		for i := range msgs {
			msgs[i].Buffers = [][]byte{make([]byte, 2048)}
		}
		for !stop.Load() {
			_ = rc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := pc.ReadBatch(msgs, 0)
			if err == nil {
				received.Add(int64(n))
			}
		}
	}()
	go func() { // sender
		defer wg.Done()
		pc := ipv4.NewPacketConn(sc)
		msgs := make([]ipv4.Message, blastBatch)
		payload := make([]byte, blastPayload)
		for i := range msgs {
			msgs[i].Buffers = [][]byte{payload}
		}
		for !stop.Load() {
			n, err := pc.WriteBatch(msgs, 0)
			if err == nil {
				sent.Add(int64(n))
			}
		}
	}()
	time.Sleep(blastWarm)
	r0, s0 := received.Load(), sent.Load()
	t0 := time.Now()
	time.Sleep(d)
	r1, s1 := received.Load(), sent.Load()
	el := time.Since(t0).Seconds()
	stop.Store(true)
	wg.Wait()
	if r1-r0 == 0 {
		return 0, 0, fmt.Errorf("no packet from %s reached %s", s.rt.ContainerID[:8], dst)
	}
	return float64(r1-r0) / el, float64(s1-s0) / el, nil
}
