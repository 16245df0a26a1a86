package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/internal/testns"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/ruleset"
	"github.com/podwire/podwire/pkg/state"
)

// requestStats time what an ordinary pod's ADD and DEL ask of the kernel,
// made by podwire's own packages from the running bench: no exec, no
// package initialisation, no CNI config or result.
type requestStats struct {
	add, del       samples
	addCPU, delCPU samples
	requests       int // nftables requests and batches of the ADD
}

// processCPU is the bench process's user + system time: the requests run
// on goroutines of its own (mdlayher/socket starts one per send and
// receive), and nothing else runs meanwhile.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countingConn counts the requests and batches sent through an nft.Conn.
type countingConn struct {
	nft.Conn
	n int
}

func (c *countingConn) ListTableOfFamily(name string, f nftables.TableFamily) (*nftables.Table, error) {
	c.n++
	return c.Conn.ListTableOfFamily(name, f)
}

func (c *countingConn) ListChain(t *nftables.Table, name string) (*nftables.Chain, error) {
	c.n++
	return c.Conn.ListChain(t, name)
}

func (c *countingConn) GetRules(t *nftables.Table, ch *nftables.Chain) ([]*nftables.Rule, error) {
	c.n++
	return c.Conn.GetRules(t, ch)
}

func (c *countingConn) GetSets(t *nftables.Table) ([]*nftables.Set, error) {
	c.n++
	return c.Conn.GetSets(t)
}

func (c *countingConn) GetSetElements(s *nftables.Set) ([]nftables.SetElement, error) {
	c.n++
	return c.Conn.GetSetElements(s)
}

func (c *countingConn) Flush() error {
	c.n++
	return c.Conn.Flush()
}

// requests measures, in a netns of its own holding the bench's podwire
// tables (the arm E config), what the kernel side of an ordinary pod's ADD
// and DEL costs when made by podwire's packages without the plugin: per
// round, one nftables socket (nft.Dial, as one invocation has), the verify
// of every table by content (nft.Ensure: nothing to repair), the pod's
// elements added in one batch and its record written (state.Store.Put on
// tmpfs); then, for DEL, a fresh socket, the elements deleted and the
// record removed. Wall time and the process's CPU time, p50.
func (b *bench) requests() error {
	g, err := testns.Make()
	if err != nil {
		return err
	}
	defer testns.Release(g)
	dir, err := os.MkdirTemp(b.stateRoot, "requests-")
	if err != nil {
		return err
	}
	entry := podwireEntry(&node{stateDir: dir, dir: dir}, nil)
	entry["cniVersion"], entry["name"] = "1.1.0", "bench-requests"
	delete(entry, "capabilities")
	raw, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	conf, err := config.Parse(raw)
	if err != nil {
		return err
	}
	env := nodetables.Env{Uplinks4: []string{"eth0"}, Uplinks6: []string{"eth0"},
		Egress4: netip.MustParseAddr(egressV4), Egress6: netip.MustParseAddr(egressV6)}
	tables := ruleset.Tables(conf, env)
	dial := func() (nft.Conn, error) { return nft.Dial(nftables.WithNetNSFd(int(g.Fd()))) }
	c, err := dial()
	if err != nil {
		return err
	}
	noLock := func() (func(), error) { return func() {}, nil }
	none := func() (nft.Elements, error) { return nil, nil }
	if _, err := nft.Ensure(c, tables, ruleset.Known(), noLock, none); err != nil {
		return fmt.Errorf("requests: laying down the tables: %w", err)
	}
	store := state.New(dir)
	s := &requestStats{}
	// As in the plugin: one P, and the requests on a goroutine that is not
	// locked to its thread (the bench's main goroutine is), so that the
	// goroutines mdlayher/socket starts per send and receive run on the
	// thread that started them.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	done := make(chan error)
	go func() { done <- b.requestRounds(s, dial, tables, conf, store) }()
	if err := <-done; err != nil {
		return err
	}
	b.r.requests = s
	return nil
}

// requestRounds are the timed rounds of requests.
func (b *bench) requestRounds(s *requestStats, dial func() (nft.Conn, error), tables []*nft.Table, conf *config.NetConf, store *state.Store) error {
	noLock := func() (func(), error) { return func() {}, nil }
	none := func() (nft.Elements, error) { return nil, nil }
	for r := -b.opt.warmup; r < 2*b.opt.rounds; r++ {
		if err := checkInterrupted(); err != nil {
			return err
		}
		rec := &state.Record{ContainerID: fmt.Sprintf("requests-%d", r+b.opt.warmup), IfName: "eth0", PodNamespace: "bench",
			PodName: fmt.Sprintf("pod-%d", r+b.opt.warmup), HostIfName: fmt.Sprintf("veth%08x", r+b.opt.warmup),
			Addresses:   []netip.Addr{netip.AddrFrom4([4]byte{10, 244, 9, byte(r + b.opt.warmup)}), netip.MustParseAddr("fd00:244:9::5")},
			SourceCheck: true, Egress: true, Complete: true}
		elems := ruleset.Elements(conf, rec)

		c0, t0 := processCPU(), time.Now()
		cc := &countingConn{}
		var err error
		if cc.Conn, err = dial(); err != nil {
			return err
		}
		rep, err := nft.Ensure(cc, tables, ruleset.Known(), noLock, none)
		if err == nil && rep.Changed() {
			err = fmt.Errorf("the tables drifted: %v", rep.Drift)
		}
		if err == nil {
			err = nft.AddElements(cc, tables, elems)
		}
		if err == nil {
			err = store.Put(rec)
		}
		closeConn(cc.Conn)
		if err != nil {
			return fmt.Errorf("requests ADD: %w", err)
		}
		add := cost{wall: time.Since(t0), cpu: processCPU() - c0}

		c0, t0 = processCPU(), time.Now()
		dc, err := dial()
		if err == nil {
			err = nft.DeleteElements(dc, elems)
		}
		if err == nil {
			err = store.Delete(rec.ContainerID, rec.IfName)
		}
		if dc != nil {
			closeConn(dc) // the plugin's socket closes at exit: the grace period is paid here
		}
		if err != nil {
			return fmt.Errorf("requests DEL: %w", err)
		}
		del := cost{wall: time.Since(t0), cpu: processCPU() - c0}
		if r >= 0 {
			s.add, s.addCPU = append(s.add, add.wall), append(s.addCPU, add.cpu)
			s.del, s.delCPU = append(s.del, del.wall), append(s.delCPU, del.cpu)
			s.requests = cc.n
		}
	}
	return nil
}

// closeConn closes nft.Dial's socket, as the end of a plugin process does.
func closeConn(c nft.Conn) {
	if l, ok := c.(interface{ CloseLasting() error }); ok {
		_ = l.CloseLasting()
	}
}
