package nft_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nft/nfttest"
)

// throwaway is a netns of its own for one test, nft(8) required.
func throwaway(t *testing.T) (name string, c *nftables.Conn) {
	t.Helper()
	name, c = nfttest.Throwaway(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft(8) is installed by scripts/install-deps.sh: %v", err)
	}
	return name, c
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
//     (known, left as is); a table with a raw payload lookup is not
//     given back to nft(8), which cannot parse it. Set declarations and interval elements are
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

			if strings.Contains(want, "@th,") {
				// nft 1.0.6 lists a raw payload looked up in a typed
				// set (the neighbour advertisement's target in
				// "bridge podwire") but refuses to parse it back:
				// "datatype mismatch". The listing and Verify above
				// still hold.
				return
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

// TestEnsureRepairsDrift drifts the source-check table behind podwire's
// back in every way Verify must see, and checks that Verify names it and
// Ensure rebuilds the table with the elements it is given (packets prove the
// repair in integration/drift_test.go).
func TestEnsureRepairsDrift(t *testing.T) {
	s := findShape(t, "sourcecheck")
	tb := &nftables.Table{Family: s.table.Family, Name: s.table.Name}
	ch := &nftables.Chain{Table: tb, Name: s.table.Chains[0].Name}
	noLock := func() (func(), error) { return func() {}, nil }
	elems := func() (nft.Elements, error) { return s.elems, nil }
	for _, tc := range []struct {
		name  string
		drift func(c *nftables.Conn)
		want  string
	}{
		{"table deleted", func(c *nftables.Conn) { c.DelTable(tb) }, "missing"},
		{"chain flushed", func(c *nftables.Conn) { c.FlushChain(ch) }, "has 0 rules, want 8"},
		{"rule deleted", func(c *nftables.Conn) {
			rules, _ := c.GetRules(tb, ch)
			_ = c.DelRule(rules[2])
		}, "has 7 rules"},
		{"foreign rule", func(c *nftables.Conn) {
			c.InsertRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: nft.Rule{nft.Accept}.Exprs(tb.Family)})
		}, "has 9 rules"},
		{"rule replaced", func(c *nftables.Conn) {
			rules, _ := c.GetRules(tb, ch)
			c.ReplaceRule(&nftables.Rule{Table: tb, Chain: ch, Handle: rules[7].Handle, Exprs: nft.Rule{nft.Accept}.Exprs(tb.Family)})
		}, "rule 8 differs"},
		{"foreign chain", func(c *nftables.Conn) { c.AddChain(&nftables.Chain{Table: tb, Name: "foreign"}) }, "holds 8 chains and sets, want 7"},
		{"marker renamed", func(c *nftables.Conn) {
			c.DelChain(&nftables.Chain{Table: tb, Name: s.table.MarkerChain()})
			c.AddChain(&nftables.Chain{Table: tb, Name: "config-0000000000000000"})
		}, "not built from this config"},
		{"set deleted", func(c *nftables.Conn) {
			c.FlushChain(ch)
			c.DelSet(&nftables.Set{Table: tb, Name: "allowed-v6"})
		}, "set allowed-v6 missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := throwaway(t)
			if _, err := nft.Ensure(c, []*nft.Table{s.table}, nil, noLock, elems); err != nil {
				t.Fatal(err)
			}
			tc.drift(c)
			if err := c.Flush(); err != nil {
				t.Fatalf("drift: %v", err)
			}
			d, err := nft.Verify(c, s.table)
			if err != nil || !strings.Contains(strings.Join(d, "\n"), tc.want) {
				t.Fatalf("Verify after %s = %q, %v; want a difference naming %q", tc.name, d, err, tc.want)
			}
			rep, err := nft.Ensure(c, []*nft.Table{s.table}, nil, noLock, elems)
			if err != nil || len(rep.Rebuilt) != 1 {
				t.Fatalf("Ensure after %s: %+v %v", tc.name, rep, err)
			}
			if d, err := nft.Verify(c, s.table); err != nil || len(d) > 0 {
				t.Errorf("Verify after the repair: %q %v", d, err)
			}
			if err := nft.CheckElements(c, []*nft.Table{s.table}, s.elems); err != nil {
				t.Errorf("elements after the repair: %v", err)
			}
		})
	}
}
