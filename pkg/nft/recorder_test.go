package nft_test

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
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
// batch begin/end) and its payload in hex. Set IDs come from a counter
// global to google/nftables, so they are renumbered in order of appearance.
func (r *recorder) dump() string {
	var b strings.Builder
	ids := map[uint32]uint32{}
	for _, m := range r.msgs {
		renumberSetID(m, ids)
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
		golden(t, filepath.Join("testdata", s.name+".batch"), got)
	}
}

// renumberSetID rewrites, in place, the set ID of a NEWSET (NFTA_SET_ID) or
// NEWSETELEM (NFTA_SET_ELEM_LIST_SET_ID) message, a top-level attribute
// after the 4-byte nfgenmsg header.
func renumberSetID(m netlink.Message, ids map[uint32]uint32) {
	attr := map[int]uint16{unix.NFT_MSG_NEWSET: unix.NFTA_SET_ID, unix.NFT_MSG_NEWSETELEM: unix.NFTA_SET_ELEM_LIST_SET_ID}
	typ := int(m.Header.Type)
	want, ok := attr[typ&0xff]
	if typ>>8 != unix.NFNL_SUBSYS_NFTABLES || !ok {
		return
	}
	for off := 4; off+4 <= len(m.Data); {
		l := int(binary.NativeEndian.Uint16(m.Data[off:]))
		if l < 4 {
			return
		}
		if binary.NativeEndian.Uint16(m.Data[off+2:])&0x3fff == want && l == 8 {
			v := binary.BigEndian.Uint32(m.Data[off+4:])
			if _, seen := ids[v]; !seen {
				ids[v] = uint32(len(ids) + 1)
			}
			binary.BigEndian.PutUint32(m.Data[off+4:], ids[v])
		}
		off += (l + 3) &^ 3
	}
}

func rulesOf(t *nft.Table) int {
	n := 0
	for _, c := range t.Chains {
		n += len(c.Rules)
	}
	return n
}
