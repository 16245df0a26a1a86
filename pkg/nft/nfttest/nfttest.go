// Package nfttest gives root tests a throwaway network namespace with an
// nftables connection into it: the host's ruleset is never touched.
package nfttest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/google/nftables"
)

// NS makes a netns for t, removed when t ends. Without root, t is skipped:
// make test-integration runs these tests as root.
func NS(t testing.TB) ns.NetNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace (make test-integration runs it)")
	}
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Close(); _ = testutils.UnmountNS(netns) })
	return netns
}

// Throwaway makes a netns for t (NS) and returns its name (for `ip netns
// exec`) and a connection into it.
func Throwaway(t testing.TB) (name string, c *nftables.Conn) {
	t.Helper()
	netns := NS(t)
	c, err := nftables.New(nftables.WithNetNSFd(int(netns.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Base(netns.Path()), c
}
