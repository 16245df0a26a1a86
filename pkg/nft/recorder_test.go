package nft_test

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/pkg/nft"
)

// recorder is a netlink peer that acknowledges every request and keeps
// them, as google/nftables' internal nftest does: the bytes podwire sends,
// without root.
type recorder struct{ msgs []netlink.Message }

func (r *recorder) conn(t *testing.T) *nftables.Conn {
	c, err := nftables.New(nftables.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		r.msgs = append(r.msgs, req...)
		var acks []netlink.Message
		for _, m := range req {
			if m.Header.Flags&netlink.Acknowledge != 0 {
				acks = append(acks, netlink.Message{
					Header: netlink.Header{Length: 4, Type: netlink.Error, Sequence: m.Header.Sequence, PID: m.Header.PID},
					Data:   []byte{0, 0, 0, 0},
				})
			}
		}
		return acks, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var msgNames = map[int]string{
	unix.NFT_MSG_NEWTABLE: "NEWTABLE", unix.NFT_MSG_DELTABLE: "DELTABLE",
	unix.NFT_MSG_NEWCHAIN: "NEWCHAIN", unix.NFT_MSG_NEWRULE: "NEWRULE",
	unix.NFT_MSG_NEWSET: "NEWSET", unix.NFT_MSG_NEWSETELEM: "NEWSETELEM",
	unix.NFT_MSG_DELSETELEM: "DELSETELEM",
}

// dump is one line per message: its nftables type (or the netlink type of
// batch begin/end) and its payload in hex.
func (r *recorder) dump() string {
	var b strings.Builder
	for _, m := range r.msgs {
		typ := int(m.Header.Type)
		name := fmt.Sprintf("type-%#x", typ)
		if typ>>8 == unix.NFNL_SUBSYS_NFTABLES {
			if n, ok := msgNames[typ&0xff]; ok {
				name = n
			}
		} else if typ == unix.NFNL_MSG_BATCH_BEGIN {
			name = "BATCH_BEGIN"
		} else if typ == unix.NFNL_MSG_BATCH_END {
			name = "BATCH_END"
		}
		fmt.Fprintf(&b, "%s %s\n", name, hex.EncodeToString(m.Data))
	}
	return b.String()
}

// TestBuildBytes records the batch Build sends for every shape and compares
// it byte for byte with testdata/NAME.batch (rewrite with -update). The
// kernel test proves these bytes build what the text says; this one pins
// them, so a library upgrade or a vocabulary change that alters the wire
// encoding shows up as a reviewed diff.
func TestBuildBytes(t *testing.T) {
	for _, s := range shapes(t) {
		r := &recorder{}
		c := r.conn(t)
		if err := nft.Build(c, s.table, s.elems[s.table.ID()]); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		got := r.dump()
		if n := strings.Count(got, "NEWRULE "); n != rulesOf(s.table) {
			t.Errorf("%s: %d NEWRULE messages, want %d", s.name, n, rulesOf(s.table))
		}
		path := filepath.Join("testdata", s.name+".batch")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run go test -update)", s.name, err)
		}
		if got != string(want) {
			t.Errorf("%s: bytes sent differ from %s:\n--- got\n%s--- want\n%s", s.name, path, got, want)
		}
	}
}

func rulesOf(t *nft.Table) int {
	n := 0
	for _, c := range t.Chains {
		n += len(c.Rules)
	}
	return n
}
