package nft

import (
	"fmt"

	"github.com/google/nftables"
)

// RuleLister is the part of *nftables.Conn that lists a chain's rules.
type RuleLister interface {
	GetRules(*nftables.Table, *nftables.Chain) ([]*nftables.Rule, error)
}

// CheckRules verifies that every chain of t holds as many rules as t
// describes. A chain flushed by hand (`nft flush chain`) keeps its name, so
// the table still looks current to ReadPresent, but it no longer filters:
// CHECK must say so. One rule dump per chain; the error names the chain and
// the table.
func CheckRules(c RuleLister, t *Table) error {
	nt := &nftables.Table{Family: t.Family, Name: t.Name}
	for _, ch := range t.Chains {
		rules, err := c.GetRules(nt, &nftables.Chain{Name: ch.Name, Table: nt})
		if err != nil {
			return fmt.Errorf("failed to list the rules of chain %s of %s: %w", ch.Name, t.ID(), err)
		}
		if len(rules) != len(ch.Rules) {
			return fmt.Errorf("chain %s of %s has %d rules, want %d", ch.Name, t.ID(), len(rules), len(ch.Rules))
		}
	}
	return nil
}
