package bench

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/internal/testns"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/ruleset"
	"github.com/podwire/podwire/pkg/state"
)

// BenchmarkGrace measures the kernel's part of a DEL with no podwire code:
// in a netns holding one table and set, one element added in a batch on a
// fresh netlink socket (google/nftables opens one per Flush, as a
// short-lived plugin does), then deleted the same way. nf_tables frees
// deleted elements after an RCU grace period that the socket's release
// waits for, so del-ms minus add-ms is what every DEL of an nftables plugin
// pays. CPU is the bench thread's.
func BenchmarkGrace(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := testns.New(b)
	conn, err := nftables.New(nftables.WithNetNSFd(int(g.Fd())))
	if err != nil {
		b.Fatal(err)
	}
	set := &nftables.Set{Table: conn.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "grace"}),
		Name: "pods", KeyType: nftables.TypeIPAddr}
	if err := conn.AddSet(set, nil); err != nil {
		b.Fatal(err)
	}
	if err := conn.Flush(); err != nil {
		b.Fatal(err)
	}
	rounds(b, 1, func(r, _ int, s samples) error {
		el := []nftables.SetElement{{Key: []byte{10, 244, byte(r >> 8), byte(r)}}}
		add, err := timed(unix.RUSAGE_THREAD, func() error {
			_ = conn.SetAddElements(set, el)
			return conn.Flush()
		})
		if err != nil {
			return err
		}
		del, err := timed(unix.RUSAGE_THREAD, func() error {
			_ = conn.SetDeleteElements(set, el)
			return conn.Flush()
		})
		s.put("add", add)
		s.put("del", del)
		return err
	})
}

// BenchmarkRequests times what an ordinary pod's ADD and DEL ask of the
// kernel, made by podwire's packages from the bench (no exec, no package
// initialisation, no CNI config or result), in a netns holding arm E's
// tables: for ADD one socket (nft.Dial), the generation read and the
// tables' fact (nft.Intact: the previous round's DEL left them known
// intact, so no verify), the pod's elements in one batch and its record
// written on tmpfs; for DEL another socket, the elements deleted (the fact
// carried) and the record removed. "add-verify" is the same ADD after
// another owner committed (a table of its own added): the verify of every
// table by content (nft.Ensure, nothing to repair) runs first. CPU is the
// process's.
func BenchmarkRequests(b *testing.B) {
	g := testns.New(b)
	dir := b.TempDir()
	entry := podwireEntry(&node{stateDir: dir, dir: dir}, map[string]any{"cniVersion": "1.1.0", "name": "bench-requests"})
	delete(entry, "capabilities")
	raw, _ := json.Marshal(entry)
	conf, err := config.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	tables := ruleset.Tables(conf, nodetables.Env{Uplinks4: []string{"eth0"}, Uplinks6: []string{"eth0"},
		Egress4: netip.MustParseAddr(egressV4), Egress6: netip.MustParseAddr(egressV6)})
	intactFile := filepath.Join(dir, "nft-intact")
	// withConn runs f on a socket of its own (nft.Dial), closed after f as
	// at the end of a plugin process (a DEL's grace period is paid there).
	withConn := func(f func(c nft.Conn) error) error {
		c, err := nft.Dial(nftables.WithNetNSFd(int(g.Fd())))
		if err != nil {
			return err
		}
		defer c.(interface{ CloseLasting() error }).CloseLasting()
		return f(c)
	}
	// The generation socket of nft.Intact is opened in the netns once and
	// dup(2)ed for each invocation (the plugin opens its own, in its
	// netns: one socket(2) where this makes one dup(2)); entering the netns
	// from here would take a thread of its own per invocation.
	var genSock int
	if err := g.Do(func(ns.NetNS) (err error) { genSock, err = nft.GenerationSocket(); return err }); err != nil {
		b.Fatal(err)
	}
	defer unix.Close(genSock)
	openIntact := func(want []*nft.Table) (*nft.Intact, error) {
		fd, err := unix.Dup(genSock)
		if err != nil {
			return nil, err
		}
		return nft.OpenIntactFD(intactFile, want, fd), nil
	}
	noLock := func() (func(), error) { return func() {}, nil }
	none := func() (nft.Elements, error) { return nil, nil }
	store := state.New(dir)
	// addDel is an ADD and a DEL of rec, as the plugin makes them.
	addDel := func(rec *state.Record) (add, del cost, err error) {
		elems := ruleset.Elements(conf, rec)
		add, err = timed(unix.RUSAGE_SELF, func() error {
			return withConn(func(c nft.Conn) error {
				in, err := openIntact(tables)
				if err != nil {
					return err
				}
				defer in.Close()
				c = in.Conn(c)
				if !in.Known() {
					rep, err := nft.Ensure(c, tables, ruleset.Known(), noLock, none)
					if err == nil && rep.Changed() {
						err = fmt.Errorf("the tables drifted: %v", rep.Drift)
					}
					if err != nil {
						return err
					}
					in.Verified()
				}
				if err := nft.AddElements(c, tables, elems); err != nil {
					return err
				}
				return store.Put(rec)
			})
		})
		if err != nil {
			return add, del, fmt.Errorf("requests ADD: %w", err)
		}
		del, err = timed(unix.RUSAGE_SELF, func() error {
			return withConn(func(c nft.Conn) error {
				in, err := openIntact(nil)
				if err != nil {
					return err
				}
				defer in.Close()
				if err := nft.DeleteElements(in.Conn(c), elems); err != nil {
					return err
				}
				return store.Delete(rec.ContainerID, rec.IfName)
			})
		})
		return add, del, err
	}
	// foreign commits what another owner would: a table of its own added
	// and deleted (a commit every time).
	foreign := func() error {
		return withConn(func(c nft.Conn) error {
			t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "bench-foreign"}
			c.AddTable(t)
			c.DelTable(t)
			return c.Flush()
		})
	}
	// As in the plugin: one P, so that the goroutines mdlayher/socket
	// starts per send and receive run on the thread that started them.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	err = withConn(func(c nft.Conn) error { _, err := nft.Ensure(c, tables, ruleset.Known(), noLock, none); return err })
	if err != nil {
		b.Fatalf("laying down the tables: %v", err)
	}
	requestRounds(b, addDel, foreign)
}

// requestRounds are BenchmarkRequests' rounds: an ADD and a DEL with the
// tables known intact, then another owner's commit, then an ADD that
// verifies and its DEL.
func requestRounds(b *testing.B, addDel func(*state.Record) (cost, cost, error), foreign func() error) {
	rounds(b, 1, func(r, _ int, s samples) error {
		rec := func(k int) *state.Record {
			return &state.Record{ContainerID: fmt.Sprintf("requests-%d-%d", r+1, k), IfName: "eth0", PodNamespace: "bench",
				PodName: fmt.Sprintf("pod-%d-%d", r+1, k), HostIfName: fmt.Sprintf("veth%07x%d", r+1, k),
				Addresses:   []netip.Addr{netip.AddrFrom4([4]byte{10, 244, byte(9 + k), byte(r + 2)}), netip.MustParseAddr("fd00:244:9::5")},
				SourceCheck: true, Egress: true, Complete: true}
		}
		add, del, err := addDel(rec(0))
		if err != nil {
			return err
		}
		if err := foreign(); err != nil {
			return err
		}
		addV, delV, err := addDel(rec(1))
		s.put("add", add)
		s.put("del", del)
		s.put("add-verify", addV)
		s.put("del-after-verify", delV)
		return err
	})
}
