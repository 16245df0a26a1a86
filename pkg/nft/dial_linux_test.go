package nft_test

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nft/nfttest"
	"github.com/podwire/podwire/pkg/sourcecheck"
)

// dialIn opens nft.Dial's one-socket connection inside a netns of its
// own, by fd: the fallback sockets after an error open there too.
func dialIn(t *testing.T) nft.Conn {
	t.Helper()
	c, err := nft.Dial(nftables.WithNetNSFd(int(nfttest.NS(t).Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDialRepliesStayInStep proves that requests on Dial's one socket read
// their own replies, after a GET of a missing table (ENOENT: the socket is
// kept) and after a batch whose acks are left unread (ENOBUFS: the socket is
// dropped for one per request): each later read returns the kernel's
// current content, and a later batch applies.
func TestDialRepliesStayInStep(t *testing.T) {
	c := dialIn(t)
	tbl := sourcecheck.Table()
	pod := sourcecheck.Pod{HostIfName: "veth1234", Addresses: []netip.Addr{netip.MustParseAddr("10.244.1.2")}, Name: "ns/pod"}
	if err := nft.Build(c, tbl, sourcecheck.Elements(pod)[tbl.ID()]); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	verify := func(when string) {
		t.Helper()
		drift, err := nft.Verify(c, tbl)
		if err != nil || len(drift) > 0 {
			t.Fatalf("%s: Verify = %v, %v; want the table current", when, drift, err)
		}
	}
	verify("after the build")

	if _, err := c.ListTableOfFamily("podwire-missing", nftables.TableFamilyINet); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("GET of a missing table = %v, want ENOENT", err)
	}
	verify("after an ENOENT reply")

	// A batch whose acks overflow the socket's receive buffer: one message
	// of one element per ack, ten times as many as the default receive
	// buffer holds (an ack takes at least 512 bytes of it; 3000 at the
	// default 208 KiB). The kernel applies it, the acks past
	// the buffer are lost (ENOBUFS) and google/nftables' Flush returns
	// without reading the ones queued: on the same socket the next request
	// would read them ("mismatched sequence in netlink reply").
	nt := &nftables.Table{Family: tbl.Family, Name: tbl.Name}
	var set *nftables.Set
	sets, err := c.GetSets(nt)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		if !s.Interval && len(setElems(t, c, s)) > 0 {
			set = s
			break
		}
	}
	if set == nil {
		t.Fatalf("no set with the pod's elements in %s", tbl.ID())
	}
	messages := 3000
	if b, err := os.ReadFile("/proc/sys/net/core/rmem_default"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			messages = max(messages, 10*n/512)
		}
	}
	for i := range messages {
		k := make([]byte, set.KeyType.Bytes)
		k[len(k)-3], k[len(k)-2], k[len(k)-1] = byte(i>>16), byte(i>>8), byte(i)
		if err := c.SetAddElements(set, []nftables.SetElement{{Key: k}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); !errors.Is(err, unix.ENOBUFS) {
		t.Fatalf("batch of %d messages = %v, want ENOBUFS (the acks overflow the receive buffer)", messages, err)
	}
	verify("after ENOBUFS")

	// A later batch applies and is read back.
	key := bytes.Repeat([]byte{0xfe}, int(set.KeyType.Bytes))
	if err := c.SetAddElements(set, []nftables.SetElement{{Key: key}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("batch after ENOBUFS: %v", err)
	}
	if !slices.ContainsFunc(setElems(t, c, set), func(e nftables.SetElement) bool { return bytes.Equal(e.Key, key) }) {
		t.Fatalf("set %s lacks the element added after ENOBUFS", set.Name)
	}
}

func setElems(t *testing.T, c nft.Conn, s *nftables.Set) []nftables.SetElement {
	t.Helper()
	e, err := c.GetSetElements(s)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
