package bench

import (
	"encoding/json"
	"errors"
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
// one element added to a set, then deleted, each in a batch on a fresh
// netlink socket (google/nftables opens one per Flush, as a short-lived
// plugin does). nf_tables frees deleted elements after an RCU grace period
// that the socket's release waits for, so del-ms minus add-ms is what every
// DEL of an nftables plugin pays. CPU is the bench thread's.
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
	if err := errors.Join(conn.AddSet(set, nil), conn.Flush()); err != nil {
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

// withConn runs f on a socket of its own in netns n (nft.Dial, as the
// plugin's), closed after f as at the end of a plugin process (a DEL's
// grace period is paid there).
func withConn(n ns.NetNS, f func(c nft.Conn) error) error {
	c, err := nft.Dial(nftables.WithNetNSFd(int(n.Fd())))
	if err != nil {
		return err
	}
	defer c.(interface{ CloseLasting() error }).CloseLasting()
	return f(c)
}

// BenchmarkRequests makes an ordinary pod's ADD and DEL as the plugin does,
// from podwire's packages in the bench (no exec, no CNI config or result),
// in a netns holding arm E's tables: a socket each, the intact fact
// (nft.Intact), the verify only when the fact is not known, the pod's
// elements and its record on tmpfs. "add" follows a DEL that left the
// tables known intact, "add-verify" another owner's commit, so that its
// verify runs. CPU is the process's.
func BenchmarkRequests(b *testing.B) {
	g := testns.New(b)
	dir := b.TempDir()
	entry := podwireEntry(&node{stateDir: dir, dir: dir}, map[string]any{"cniVersion": "1.1.0", "name": "bench-requests"})
	raw, _ := json.Marshal(entry)
	conf, err := config.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	tables := ruleset.Tables(conf, nodetables.Env{Uplinks4: []string{"eth0"}, Uplinks6: []string{"eth0"},
		Egress4: netip.MustParseAddr(egressV4), Egress6: netip.MustParseAddr(egressV6)})
	store := state.New(dir)
	// nft.Intact's generation socket is opened in the netns once and dup(2)ed
	// per invocation (one dup(2) for the plugin's socket(2)): entering the
	// netns from here would take a thread of its own per invocation.
	var genSock int
	if err := g.Do(func(ns.NetNS) (err error) { genSock, err = nft.GenerationSocket(); return err }); err != nil {
		b.Fatal(err)
	}
	defer unix.Close(genSock)
	// invocation is one plugin process's socket and intact fact of the
	// tables want (nil: the file's, which DEL carries).
	invocation := func(want []*nft.Table, f func(c nft.Conn, in *nft.Intact) error) (cost, error) {
		return timed(unix.RUSAGE_SELF, func() error {
			return withConn(g, func(c nft.Conn) error {
				fd, err := unix.Dup(genSock)
				if err != nil {
					return err
				}
				in := nft.OpenIntactFD(filepath.Join(dir, "nft-intact"), want, fd)
				defer in.Close()
				return f(in.Conn(c), in)
			})
		})
	}
	// As in the plugin: one P, so that the goroutines mdlayher/socket
	// starts per send and receive run on the thread that started them.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	err = withConn(g, func(c nft.Conn) error { _, err := ruleset.Ensure(c, tables, store, conf, store.Lock, nil); return err })
	if err != nil {
		b.Fatalf("laying down the tables: %v", err)
	}
	// Either order of the two is the same: each DEL leaves the tables known
	// intact.
	rounds(b, 2, func(r, k int, s samples) error {
		if k == 1 { // another owner's commit: a table of its own added and deleted
			err := withConn(g, func(c nft.Conn) error {
				t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "bench-foreign"}
				c.AddTable(t)
				c.DelTable(t)
				return c.Flush()
			})
			if err != nil {
				return err
			}
		}
		rec := &state.Record{ContainerID: fmt.Sprintf("requests-%d-%d", r+1, k), IfName: "eth0", PodNamespace: "bench",
			PodName: fmt.Sprintf("pod-%d-%d", r+1, k), HostIfName: fmt.Sprintf("veth%07x%d", r+1, k),
			Addresses:   []netip.Addr{netip.AddrFrom4([4]byte{10, 244, byte(9 + k), byte(r + 2)}), netip.MustParseAddr("fd00:244:9::5")},
			SourceCheck: true, Egress: true, Complete: true}
		elems := ruleset.Elements(conf, rec)
		add, err := invocation(tables, func(c nft.Conn, in *nft.Intact) error {
			if !in.Known() {
				if rep, err := ruleset.Ensure(c, tables, store, conf, store.Lock, nil); err != nil || rep.Changed() {
					return fmt.Errorf("verify: %v, drift %v", err, rep.Drift)
				}
				in.Verified()
			}
			if err := nft.AddElements(c, tables, elems); err != nil {
				return err
			}
			return store.Put(rec)
		})
		if err != nil {
			return fmt.Errorf("requests ADD: %w", err)
		}
		del, err := invocation(nil, func(c nft.Conn, _ *nft.Intact) error {
			if err := nft.DeleteElements(c, elems); err != nil {
				return err
			}
			return store.Delete(rec.ContainerID, rec.IfName)
		})
		s.put([]string{"add", "add-verify"}[k], add)
		s.put([]string{"del", "del-after-verify"}[k], del)
		return err
	})
}
