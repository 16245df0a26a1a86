package neigh

import (
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/podwire/podwire/internal/testns"
	"github.com/vishvananda/netlink"
)

func ip(t *testing.T, n ns.NetNS, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", filepath.Base(n.Path())}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// neighMAC is the MAC of addr in n's neighbour table on ifName, and whether
// the entry is permanent.
func neighMAC(t *testing.T, n ns.NetNS, ifName, addr string) (string, bool) {
	t.Helper()
	var mac string
	var perm bool
	if err := n.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(ifName)
		if err != nil {
			return err
		}
		list, err := List(l.Attrs().Index)
		for _, e := range list {
			if e.IP.Equal(net.ParseIP(addr)) {
				mac, perm = e.HardwareAddr.String(), e.State&netlink.NUD_PERMANENT != 0
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac, perm
}

// TestAnnounceMovesNeighbourEntries: a neighbour holding another MAC for the
// pod's addresses (a reused IP) holds the pod's MAC once Announce returns;
// the pod keeps its permanent neighbour entries, which the kernel's address
// change flushes.
func TestAnnounceMovesNeighbourEntries(t *testing.T) {
	pod, nb := testns.New(t), testns.New(t)
	ip(t, pod, "link", "add", "e0", "type", "veth", "peer", "name", "e1", "netns", filepath.Base(nb.Path()))
	ip(t, pod, "addr", "add", "10.1.0.1/24", "dev", "e0")
	ip(t, pod, "addr", "add", "2001:db8::1/64", "dev", "e0", "nodad")
	ip(t, nb, "addr", "add", "10.1.0.2/24", "dev", "e1")
	ip(t, nb, "addr", "add", "2001:db8::2/64", "dev", "e1", "nodad")
	ip(t, nb, "link", "set", "e1", "up")
	ip(t, pod, "link", "set", "e0", "up")
	ip(t, pod, "neigh", "add", "10.1.0.254", "lladdr", "02:00:00:00:00:fe", "nud", "permanent", "dev", "e0")
	ip(t, pod, "neigh", "add", "2001:db8::fe", "lladdr", "02:00:00:00:00:fe", "nud", "permanent", "dev", "e0")
	const old = "02:00:00:00:00:99"
	for _, a := range []string{"10.1.0.1", "2001:db8::1"} {
		ip(t, nb, "neigh", "replace", a, "lladdr", old, "nud", "stale", "dev", "e1")
	}
	var podMAC string
	if err := pod.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName("e0")
		if err == nil {
			podMAC = l.Attrs().HardwareAddr.String()
		}
		if err := WaitOperUp("e0", time.Second); err != nil {
			return err
		}
		return Announce("e0")
	}); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	// The announcements were sent inside the netlink request; the
	// neighbour's softirq processes them soon after: wait for each entry,
	// within a bound, instead of for a fixed time.
	for _, a := range []string{"10.1.0.1", "2001:db8::1"} {
		deadline := time.Now().Add(2 * time.Second)
		got, _ := neighMAC(t, nb, "e1", a)
		for got != podMAC && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			got, _ = neighMAC(t, nb, "e1", a)
		}
		if got != podMAC {
			t.Errorf("2 s after Announce the neighbour's entry for %s is %q, want the pod's %s", a, got, podMAC)
		}
	}
	for _, a := range []string{"10.1.0.254", "2001:db8::fe"} {
		if got, perm := neighMAC(t, pod, "e0", a); got != "02:00:00:00:00:fe" || !perm {
			t.Errorf("pod's permanent entry for %s is %q (permanent %v) after Announce", a, got, perm)
		}
	}
}

// TestWaitOperUp: WaitOperUp returns once the link's carrier comes up (the
// veth's peer set up later, seen as a link notification), and fails naming
// the state when it never does.
func TestWaitOperUp(t *testing.T) {
	a, b := testns.New(t), testns.New(t)
	ip(t, a, "link", "add", "e0", "type", "veth", "peer", "name", "e1", "netns", filepath.Base(b.Path()))
	ip(t, a, "link", "set", "e0", "up") // no carrier until e1 is up: e0 is lowerlayerdown
	errs := make(chan error, 1)
	go func() {
		errs <- a.Do(func(ns.NetNS) error { return WaitOperUp("e0", 10*time.Second) })
	}()
	time.Sleep(100 * time.Millisecond)
	ip(t, b, "link", "set", "e1", "up")
	if err := <-errs; err != nil {
		t.Fatalf("WaitOperUp after the peer came up: %v", err)
	}
	ip(t, b, "link", "set", "e1", "down")
	err := a.Do(func(ns.NetNS) error { return WaitOperUp("e0", 200*time.Millisecond) })
	if err == nil || !strings.Contains(err.Error(), "still") {
		t.Fatalf("WaitOperUp of a link without carrier: %v, want an error naming its state", err)
	}
}
