// Package testns makes the throwaway network namespaces every root test,
// suite and benchmark of podwire works in (a node, a pod, a server behind
// the node), so that the host's own links, routes, sysctls and ruleset are
// never touched. It is the one way to make one: Make and Release for code
// that must not call t.Fatal (goroutines, the bench's harness), New for a
// test.
package testns

import (
	"fmt"
	"os"
	"testing"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Make creates a network namespace (testutils.NewNS: bind-mounted under
// /var/run/netns) with lo up. The caller releases it with Release.
func Make() (ns.NetNS, error) {
	n, err := testutils.NewNS()
	if err != nil {
		return nil, fmt.Errorf("failed to create netns: %w", err)
	}
	err = n.Do(func(ns.NetNS) error {
		lo, err := netlinksafe.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		return err
	})
	if err != nil {
		Release(n)
		return nil, fmt.Errorf("failed to bring up lo in %s: %w", n.Path(), err)
	}
	return n, nil
}

// Release closes n and removes its bind mount; the kernel then removes its
// links, routes and tables once nothing else holds it. Under parallel ADDs a
// plain unmount can fail with EBUSY while another goroutine's new netns
// mount propagates through the shared /var/run/netns; a lazy unmount
// (MNT_DETACH) then still removes it, so nothing leaves a netns behind. A
// nil n is ignored.
func Release(n ns.NetNS) {
	if n == nil {
		return
	}
	n.Close()
	if err := testutils.UnmountNS(n); err != nil {
		_ = unix.Unmount(n.Path(), unix.MNT_DETACH)
		_ = os.Remove(n.Path())
	}
}

// New is Make for t: t is skipped without root (make test-integration and
// the suites run as root), fails when the namespace cannot be made, and the
// namespace is released when t ends.
func New(t testing.TB) ns.NetNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace (make test-integration runs it as root)")
	}
	n, err := Make()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(n) })
	return n
}
