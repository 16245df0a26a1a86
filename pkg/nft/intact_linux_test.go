package nft_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nft/nfttest"
	"github.com/podwire/podwire/pkg/sourcecheck"
)

// intactNode is a netns holding the source check table, as an ADD left it,
// with a connection into it and a stateDir for the generation file.
type intactNode struct {
	t     *testing.T
	netns ns.NetNS
	c     *nftables.Conn
	want  []*nft.Table
	file  string
}

func newIntactNode(t *testing.T) *intactNode {
	t.Helper()
	n := &intactNode{t: t, netns: nfttest.NS(t), want: []*nft.Table{sourcecheck.Table()},
		file: filepath.Join(t.TempDir(), "nft-intact")}
	var err error
	if n.c, err = nftables.New(nftables.WithNetNSFd(int(n.netns.Fd()))); err != nil {
		t.Fatal(err)
	}
	if err := nft.Build(n.c, n.want[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := n.c.Flush(); err != nil {
		t.Fatal(err)
	}
	return n
}

// in runs f in the node's netns (Generation reads the calling thread's).
func (n *intactNode) in(f func()) {
	n.t.Helper()
	if err := n.netns.Do(func(ns.NetNS) error { f(); return nil }); err != nil {
		n.t.Fatal(err)
	}
}

// add is an ADD's use of Intact: open, verify unless known, one element
// batch for pod, close. It returns whether the verify was skipped.
func (n *intactNode) add(pod string, addr string, want []*nft.Table) (skipped bool) {
	n.t.Helper()
	n.in(func() {
		in := nft.OpenIntact(n.file, want)
		c := in.Conn(n.c)
		if skipped = in.Known(); !skipped {
			drift, err := nft.Verify(n.c, want[0])
			if err != nil {
				n.t.Fatal(err)
			}
			if len(drift) > 0 {
				in.Spoil()
			} else {
				in.Verified()
			}
		}
		e := sourcecheck.Elements(sourcecheck.Pod{HostIfName: pod, Addresses: []netip.Addr{netip.MustParsePrefix(addr).Addr()}, Name: pod})
		if err := nft.AddElements(c, want, e); err != nil {
			n.t.Fatal(err)
		}
		in.Close()
	})
	return skipped
}

// del is a DEL's use: the fact carried from the file through its batch.
func (n *intactNode) del(pod string, addr string) {
	n.t.Helper()
	n.in(func() {
		in := nft.OpenIntact(n.file, nil)
		e := sourcecheck.Elements(sourcecheck.Pod{HostIfName: pod, Addresses: []netip.Addr{netip.MustParsePrefix(addr).Addr()}, Name: pod})
		if err := nft.DeleteElements(in.Conn(n.c), e); err != nil {
			n.t.Fatal(err)
		}
		in.Close()
	})
}

// foreign commits what another owner would: a table of its own.
func (n *intactNode) foreign(name string) {
	n.t.Helper()
	n.c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: name})
	if err := n.c.Flush(); err != nil {
		n.t.Fatal(err)
	}
}

// racingConn commits another owner's change (after) right after each of
// its flushes.
type racingConn struct {
	*nftables.Conn
	after func()
}

func (r *racingConn) Flush() error {
	err := r.Conn.Flush()
	r.after()
	return err
}

// TestIntactSkipsOnlyAtTheSameGeneration: the verify of an ADD is skipped
// only when nothing but podwire's own element batches committed since a
// verify found the tables intact; every other commit brings it back.
func TestIntactSkipsOnlyAtTheSameGeneration(t *testing.T) {
	n := newIntactNode(t)
	if n.add("pod1", "10.0.0.1/32", n.want) {
		t.Fatal("first ADD skipped its verify with no file")
	}
	if !n.add("pod2", "10.0.0.2/32", n.want) {
		t.Error("second ADD verified again, with only the first ADD's batch committed since")
	}
	// The same elements again: no transaction of their own, so only the
	// witness commits; the count still matches.
	if !n.add("pod2", "10.0.0.2/32", n.want) {
		t.Error("ADD after a repeated ADD verified again")
	}
	if !n.add("pod3", "10.0.0.3/32", n.want) {
		t.Error("ADD after a repeated ADD (existing elements) verified again")
	}
	n.del("pod3", "10.0.0.3/32")
	if !n.add("pod4", "10.0.0.4/32", n.want) {
		t.Error("ADD after a DEL verified again")
	}

	n.foreign("kube-proxy")
	if n.add("pod5", "10.0.0.5/32", n.want) {
		t.Fatal("ADD skipped its verify after another owner committed")
	}
	if !n.add("pod6", "10.0.0.6/32", n.want) {
		t.Error("the full verify after the foreign commit did not carry forward")
	}

	// A foreign commit between an ADD's start and its end: it proves
	// nothing, so the next ADD verifies. The ADD repeats pod6's elements,
	// which exist: its batch commits only through the marker update, without
	// which the foreign commit would pass for the ADD's own.
	n.in(func() {
		in := nft.OpenIntact(n.file, n.want)
		if !in.Known() {
			t.Fatal("not known at the start")
		}
		n.foreign("between")
		e := sourcecheck.Elements(sourcecheck.Pod{HostIfName: "pod6", Addresses: []netip.Addr{netip.MustParsePrefix("10.0.0.6/32").Addr()}, Name: "pod6"})
		if err := nft.AddElements(in.Conn(n.c), n.want, e); err != nil {
			t.Fatal(err)
		}
		in.Close()
	})
	if n.add("pod8", "10.0.0.8/32", n.want) {
		t.Error("ADD skipped its verify after a foreign commit inside the previous ADD")
	}

	// Two ADDs at once, both started at the same generation: the second's
	// batch follows the first's through the file, and the fact goes on.
	n.in(func() {
		a, b := nft.OpenIntact(n.file, n.want), nft.OpenIntact(n.file, n.want)
		defer a.Close()
		defer b.Close()
		if !a.Known() || !b.Known() {
			t.Fatal("not known at the start of two ADDs")
		}
		for i, in := range []*nft.Intact{a, b} {
			pod := fmt.Sprintf("pod1%d", i+1)
			e := sourcecheck.Elements(sourcecheck.Pod{HostIfName: pod, Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(11 + i)})}, Name: pod})
			if err := nft.AddElements(in.Conn(n.c), n.want, e); err != nil {
				t.Fatal(err)
			}
		}
	})
	if !n.add("pod13", "10.0.0.13/32", n.want) {
		t.Error("ADD after two concurrent ADDs verified again")
	}

	// A foreign commit right after an ADD's batch, before it reads the
	// generation again, with the ADD's elements all present already (so
	// its own elements commit nothing): the marker update makes its batch
	// a commit of its own, so the two are seen as two.
	n.in(func() {
		in := nft.OpenIntact(n.file, n.want)
		defer in.Close()
		if !in.Known() {
			t.Fatal("not known at the start")
		}
		e := sourcecheck.Elements(sourcecheck.Pod{HostIfName: "pod13", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.13")}, Name: "pod13"})
		racing := &racingConn{Conn: n.c, after: func() { n.foreign("racer") }}
		if err := nft.AddElements(in.Conn(racing), n.want, e); err != nil {
			t.Fatal(err)
		}
	})
	if n.add("pod14", "10.0.0.14/32", n.want) {
		t.Error("ADD skipped its verify after a foreign commit raced an ADD's batch")
	}

	// Another config (other tables or hashes) is another fact.
	n.in(func() {
		if nft.OpenIntact(n.file, []*nft.Table{sourcecheck.BridgeTable()}).Known() {
			t.Error("a file written for other tables matched")
		}
	})

	// A torn or foreign file is no fact.
	if !n.add("pod9", "10.0.0.9/32", n.want) {
		t.Fatal("not carried forward")
	}
	b, err := os.ReadFile(n.file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.file, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	n.in(func() {
		if nft.OpenIntact(n.file, n.want).Known() {
			t.Error("half a line matched")
		}
	})
	if err := os.WriteFile(n.file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// Another netns brought to the same generation, its tables intact too:
	// the file names the netns it was written in.
	var gen uint32
	n.in(func() { gen, err = nft.Generation() })
	other := newIntactNode(t)
	for i := 0; ; i++ {
		var g uint32
		other.in(func() { g, err = nft.Generation() })
		if err != nil || g >= gen {
			if g != gen {
				t.Fatalf("generation %d in the other netns, want %d (%v)", g, gen, err)
			}
			break
		}
		other.foreign(fmt.Sprintf("t%d", i))
	}
	other.in(func() {
		if nft.OpenIntact(n.file, n.want).Known() {
			t.Error("a file written in another netns matched")
		}
	})
}

// TestIntactRebuildProvesNothing: a drift found and repaired in an
// invocation writes no fact (the next ADD verifies), and a drift made
// after a fact was written is found by the next ADD, which verifies.
func TestIntactRebuildProvesNothing(t *testing.T) {
	n := newIntactNode(t)
	n.add("pod1", "10.0.0.1/32", n.want)
	// Drift: the prerouting chain flushed (a foreign commit).
	ch := n.want[0].Chains[0]
	n.c.FlushChain(&nftables.Chain{Name: ch.Name, Table: &nftables.Table{Family: n.want[0].Family, Name: n.want[0].Name}})
	if err := n.c.Flush(); err != nil {
		t.Fatal(err)
	}
	n.in(func() {
		in := nft.OpenIntact(n.file, n.want)
		if in.Known() {
			t.Fatal("known after the chain was flushed")
		}
		c := in.Conn(n.c)
		rep, err := nft.Ensure(c, n.want, nil, func() (func(), error) { return func() {}, nil },
			func() (nft.Elements, error) { return nft.Elements{}, nil })
		if err != nil || !rep.Changed() {
			t.Fatalf("Ensure: %v, %+v", err, rep)
		}
		in.Close()
	})
	n.in(func() {
		if nft.OpenIntact(n.file, n.want).Known() {
			t.Error("a rebuild wrote a fact")
		}
	})
	if n.add("pod2", "10.0.0.2/32", n.want) {
		t.Error("ADD after a rebuild skipped its verify")
	}
	drift, err := nft.Verify(n.c, n.want[0])
	if err != nil || len(drift) > 0 {
		t.Errorf("after the repair: drift %v, %v", drift, err)
	}

	// The tables replaced by another config's (another hash): the file's
	// marker is gone, and a DEL carrying the stale file must not create it.
	other := sourcecheck.Table()
	other.Sets[0].Comment += " (another build)"
	n.c.DelTable(&nftables.Table{Family: other.Family, Name: other.Name})
	if err := nft.Build(n.c, other, nil); err != nil {
		t.Fatal(err)
	}
	if err := n.c.Flush(); err != nil {
		t.Fatal(err)
	}
	n.del("pod2", "10.0.0.2/32")
	if drift, err := nft.Verify(n.c, other); err != nil || len(drift) > 0 {
		t.Errorf("a DEL with a stale file changed the tables: drift %v, %v", drift, err)
	}
}
