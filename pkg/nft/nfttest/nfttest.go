// Package nfttest gives root tests a throwaway network namespace with an
// nftables connection into it: the host's ruleset is never touched.
package nfttest

import (
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/podwire/podwire/internal/testns"
)

// NS makes a netns for t, removed when t ends. Without root, t is skipped:
// make test-integration runs these tests as root.
func NS(t testing.TB) ns.NetNS {
	t.Helper()
	return testns.New(t)
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
