package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/pkg/nft"
)

// pluginComm is the command name (the kernel's comm, TASK_COMM_LEN) of the
// installed plugin, which the runtime runs for ADD, DEL and GC and this
// agent for `podwire collect`: what it commits is podwire's own.
const pluginComm = "podwire"

// tableSettle is how long the agent waits after another owner's change to
// a podwire table before it repairs: a script deleting elements one
// command at a time makes one repair, and the repair still lands well
// within 200 ms of the first change.
const tableSettle = 30 * time.Millisecond

// tableChange is one ruleset generation that touched a podwire table:
// the generation, and the command name of the task that committed it
// (NFTA_GEN_PROC_NAME). The kernel's NFTA_GEN_PROC_PID is the committing
// thread's ID, not its process's, so a Go program cannot match it.
type tableChange struct {
	gen  uint32
	comm string
}

// tableWatch reads nftables' own notifications (NFNLGRP_NFTABLES): every
// object a batch changes (table, chain, rule, set, element), then the
// batch's new generation (NFT_MSG_NEWGEN). It keeps the generations that
// touched a table named with nft.OwnerPrefix; the agent's loop decides
// which of them were another owner's. Only the table name of each message
// is decoded, so another owner's large commits (kube-proxy's) cost the
// agent a read, not a parse of their rules.
type tableWatch struct {
	conn *netlink.Conn
	// touched: a message of the batch under way named a podwire table.
	touched bool

	mu      sync.Mutex
	pending []tableChange
	// lost: pending overflowed, or the socket failed (ENOBUFS when the
	// kernel's notifications came faster than they were read): a change
	// may have gone unseen.
	lost bool
	// ready is signalled (without blocking) when pending grew or lost
	// was set; closed when the watch ended, after ended is set.
	ready chan struct{}
	ended bool
}

// maxPending bounds the generations kept between two reads of the
// reconciler; past it the watch reports a loss, answered with a repair.
const maxPending = 1024

// watchTables subscribes to nftables' notifications in the calling
// thread's netns (the node's) and reads them until ctx ends or the socket
// fails; the kernel notifications' reconciler takes them (notify.go).
func (a *Agent) watchTables(ctx context.Context) (*tableWatch, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err == nil {
		if err = c.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
			c.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("no nftables notifications (table drift is repaired by the backstop only): %w", err)
	}
	// Room for a burst (a flush of a large ruleset is a message per
	// object); a best effort, the loss is handled.
	_ = c.SetReadBuffer(4 << 20)
	w := &tableWatch{conn: c, ready: make(chan struct{}, 1)}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	go func() {
		defer stop()
		defer close(w.ready)
		for {
			msgs, err := c.Receive()
			if err != nil {
				if ctx.Err() == nil {
					a.log.Warn("nftables notifications", "error", err)
				}
				w.mu.Lock()
				w.lost, w.ended = true, true
				w.mu.Unlock()
				c.Close()
				return
			}
			w.read(msgs)
		}
	}()
	return w, nil
}

// read takes one receive's messages.
func (w *tableWatch) read(msgs []netlink.Message) {
	var changes []tableChange
	for _, m := range msgs {
		var ch *tableChange
		ch, w.touched = batchStep(m, w.touched)
		if ch != nil {
			changes = append(changes, *ch)
		}
	}
	if len(changes) == 0 {
		return
	}
	w.mu.Lock()
	if len(w.pending)+len(changes) > maxPending {
		w.pending, w.lost = nil, true
	} else {
		w.pending = append(w.pending, changes...)
	}
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// take returns and forgets the generations seen since the last take, and
// whether a change may have been lost; ended: the watch has ended.
func (w *tableWatch) take() (changes []tableChange, lost, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, lost := w.pending, w.lost
	w.pending, w.lost = nil, false
	return p, lost, w.ended
}

// batchStep folds one notification into the batch under way (touched: a
// podwire table was named so far) and returns the batch's change at its
// NFT_MSG_NEWGEN when it touched a podwire table. Every object message of
// nf_tables carries its table's name as attribute 1 (NFTA_TABLE_NAME,
// NFTA_CHAIN_TABLE, NFTA_RULE_TABLE, NFTA_SET_TABLE,
// NFTA_SET_ELEM_LIST_TABLE, NFTA_OBJ_TABLE, NFTA_FLOWTABLE_TABLE), after
// the 4-byte nfgenmsg.
func batchStep(m netlink.Message, touched bool) (*tableChange, bool) {
	if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES || len(m.Data) < 4 {
		return nil, touched
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return nil, touched
	}
	ad.ByteOrder = binary.BigEndian
	if m.Header.Type&0xff == unix.NFT_MSG_NEWGEN {
		var ch tableChange
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_GEN_ID:
				ch.gen = ad.Uint32()
			case unix.NFTA_GEN_PROC_NAME:
				ch.comm = ad.String()
			}
		}
		if !touched {
			return nil, false
		}
		return &ch, false
	}
	for ad.Next() {
		if ad.Type() == 1 {
			if strings.HasPrefix(ad.String(), nft.OwnerPrefix) {
				return nil, true
			}
			break
		}
	}
	return nil, touched
}

// ownWindow is the span of generations one of this agent's repairs
// committed in: (from, to], read before and after it.
type ownWindow struct{ from, to uint32 }

// contains reports whether gen is in (from, to], in the kernel's wrapping
// 32-bit sequence.
func (w ownWindow) contains(gen uint32) bool {
	return int32(gen-w.from) > 0 && int32(w.to-gen) >= 0
}

// ownGens remembers the windows of the last repairs: the notifications of
// a repair's commits are read by the runner after the repair returns, maybe
// after the next one.
type ownGens struct {
	comm    string
	windows [4]ownWindow
	next    int
}

// newOwnGens is the memory of a process whose command name is comm.
func newOwnGens() *ownGens {
	b, _ := os.ReadFile("/proc/self/comm")
	return &ownGens{comm: strings.TrimSpace(string(b))}
}

// add remembers a repair's window.
func (o *ownGens) add(w ownWindow) {
	o.windows[o.next%len(o.windows)] = w
	o.next++
}

// foreign reports whether c was another owner's change: not the plugin's
// (its command name), and not a commit of this process made while one of
// its repairs ran. A commit of this process outside a repair is foreign:
// the agent changes podwire's tables only by repairs, and a test that
// runs the agent in its own process flushes the ruleset from there.
func (o *ownGens) foreign(c tableChange) bool {
	if c.comm == pluginComm {
		return false
	}
	if c.comm == o.comm {
		for _, w := range o.windows[:min(o.next, len(o.windows))] {
			if w.contains(c.gen) {
				return false
			}
		}
	}
	return true
}

// foreignChange reports whether one of changes was another owner's, and
// logs it.
func (a *Agent) foreignChange(changes []tableChange) bool {
	for _, c := range changes {
		if a.tables.own.foreign(c) {
			a.log.Info("podwire's tables changed by another owner", "generation", c.gen, "command", c.comm)
			return true
		}
	}
	return false
}
