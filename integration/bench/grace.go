package main

import (
	"fmt"
	"time"

	"github.com/google/nftables"
	"github.com/podwire/podwire/internal/testns"
	"golang.org/x/sys/unix"
)

// graceStats time one nftables batch on a fresh netlink socket, as a
// short-lived plugin sends it: one set element added, then deleted.
type graceStats struct {
	add, del       samples
	addCPU, delCPU samples
}

// threadCPU is the calling thread's user + system time (the bench's main
// goroutine is locked to its thread; the kernel work of its syscalls lands
// there).
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// grace measures the kernel's part of a DEL: nf_tables frees deleted set
// elements after an RCU grace period, and releasing the batch socket waits
// for it (findings, cause 3). In a netns of its own with one table and one
// set (no podwire code at all), each round adds one element in a batch on
// a fresh socket (google/nftables opens and closes one per Flush), then
// deletes it the same way; the difference of the two is the grace period
// that every DEL of podwire (and portmap, and any nftables CNI plugin)
// pays in wall time.
func (b *bench) grace() error {
	g, err := testns.Make()
	if err != nil {
		return err
	}
	defer testns.Release(g)
	conn, err := nftables.New(nftables.WithNetNSFd(int(g.Fd())))
	if err != nil {
		return err
	}
	t := conn.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "grace"})
	set := &nftables.Set{Table: t, Name: "pods", KeyType: nftables.TypeIPAddr}
	if err := conn.AddSet(set, nil); err != nil {
		return err
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("grace table: %w", err)
	}
	s := &graceStats{}
	timedFlush := func(f func() error) (cost, error) {
		c0, t0 := threadCPU(), time.Now()
		if err := f(); err != nil {
			return cost{}, err
		}
		if err := conn.Flush(); err != nil {
			return cost{}, err
		}
		return cost{wall: time.Since(t0), cpu: threadCPU() - c0}, nil
	}
	rounds := 2 * b.opt.rounds
	for r := -b.opt.warmup; r < rounds; r++ {
		if err := checkInterrupted(); err != nil {
			return err
		}
		el := []nftables.SetElement{{Key: []byte{10, 244, byte(r >> 8), byte(r)}}}
		add, err := timedFlush(func() error { return conn.SetAddElements(set, el) })
		if err != nil {
			return fmt.Errorf("grace add: %w", err)
		}
		del, err := timedFlush(func() error { return conn.SetDeleteElements(set, el) })
		if err != nil {
			return fmt.Errorf("grace delete: %w", err)
		}
		if r >= 0 {
			s.add, s.addCPU = append(s.add, add.wall), append(s.addCPU, add.cpu)
			s.del, s.delCPU = append(s.del, del.wall), append(s.delCPU, del.cpu)
		}
	}
	b.r.grace = s
	return nil
}
