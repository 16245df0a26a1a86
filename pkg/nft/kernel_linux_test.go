package nft_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
)

// throwaway makes a netns for one test and an nftables connection into it;
// the host's ruleset is never touched.
func throwaway(t *testing.T) (name string, c *nftables.Conn) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace (make test-integration runs it)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft(8) is installed by scripts/install-deps.sh: %v", err)
	}
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Close(); _ = testutils.UnmountNS(netns) })
	c, err = nftables.New(nftables.WithNetNSFd(int(netns.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	_ = ns.NetNS(netns)
	return filepath.Base(netns.Path()), c
}

func nftIn(t *testing.T, netns string, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", netns, "nft"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nft %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestKernelListsText lays every shape down as ADD does and proves, on this
// kernel and nft(8):
//   - `nft -s list table` prints exactly the rendered text;
//   - Verify finds nothing to repair;
//   - nft(8), given the rendered text, builds the same rule expressions
//     podwire sends (Verify of the table nft made), except the IPv6 address
//     rewrite, whose checksum encoding differs on purpose (nft.SetAddr), and
//     the ARP sender match, where nft(8) adds header checks of its own
//     (known, left as is). Set declarations and interval elements are
//     encoded differently by nft(8) and google/nftables (key length of a
//     concatenation, interval end elements) and are not compared.
func TestKernelListsText(t *testing.T) {
	for _, s := range shapes(t) {
		t.Run(s.name, func(t *testing.T) {
			netns, c := throwaway(t)
			if err := nft.Build(c, s.table, s.elems[s.table.ID()]); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(); err != nil {
				t.Fatalf("kernel refused %s: %v", s.name, err)
			}
			want := s.table.Text(s.elems[s.table.ID()])
			got := nftIn(t, netns, "", "-s", "list", "table", nft.FamilyName(s.table.Family), s.table.Name)
			if got != want {
				t.Errorf("nft -s list table differs from the rendered text:\n--- nft\n%s--- rendered\n%s", got, want)
			}
			if d, err := nft.Verify(c, s.table); err != nil || len(d) > 0 {
				t.Errorf("Verify of what Build laid down: %q %v", d, err)
			}

			other, oc := throwaway(t)
			nftIn(t, other, want, "-f", "-")
			d, err := nft.Verify(oc, s.table)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range d {
				if !strings.Contains(x, " rule ") || strings.Contains(x, "ip6 saddr set") ||
					strings.Contains(x, "ip6 daddr set") || strings.Contains(x, "arp saddr ip") {
					continue
				}
				t.Errorf("nft -f of the rendered text built something else: %s", x)
			}
		})
	}
}
