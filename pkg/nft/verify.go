package nft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Reader is what Verify reads: podwire's objects by name, never a dump of
// every chain of the node (whose other owners may hold tens of thousands).
type Reader interface {
	// ListTableOfFamily GETs one table (NFT_MSG_GETTABLE with its name).
	ListTableOfFamily(name string, family nftables.TableFamily) (*nftables.Table, error)
	// ListChain GETs one chain by table and name.
	ListChain(*nftables.Table, string) (*nftables.Chain, error)
	// GetRules dumps the rules of one chain (the kernel filters by table
	// and chain name).
	GetRules(*nftables.Table, *nftables.Chain) ([]*nftables.Rule, error)
	// GetSets dumps the sets of one table.
	GetSets(*nftables.Table) ([]*nftables.Set, error)
	GetSetElements(*nftables.Set) ([]nftables.SetElement, error)
}

// tablePresent GETs table id by name.
func tablePresent(c Reader, id ID) (bool, error) {
	_, err := c.ListTableOfFamily(id.Name, id.Family)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("failed to read nftables table %s: %w", id, err)
}

// Verify compares table t with the kernel's by content and returns what
// differs ("inet podwire: chain filter-prerouting has 0 rules, want 8"), none
// when the table is current:
//   - the table exists and holds exactly t's chains and sets (its use count:
//     a foreign chain or set added inside it is drift too);
//   - the hash marker chain names t's hash (a changed config or podwire);
//   - each chain has t's type, hook and priority, and exactly t's rules,
//     expression for expression (a flushed chain, a deleted rule, a foreign
//     rule inside it);
//   - each set has t's key and flags, and a set with static elements holds
//     exactly those.
//
// Reads: one GET of the table, one GET per chain, one rule dump per chain
// (filtered by the kernel to that chain), one set dump of the table, one
// element dump per set with static elements. Per-pod elements are not read.
// An error is returned only when the kernel cannot be read at all.
func Verify(c Reader, t *Table) ([]string, error) {
	id := t.ID()
	nt := &nftables.Table{Family: t.Family, Name: t.Name}
	have, err := c.ListTableOfFamily(t.Name, t.Family)
	if errors.Is(err, unix.ENOENT) {
		return []string{id.String() + ": missing"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read nftables table %s: %w", id, err)
	}
	var d []string
	add := func(format string, args ...any) { d = append(d, id.String()+": "+fmt.Sprintf(format, args...)) }
	if use, want := tableUse(have), uint32(len(t.Chains)+len(t.Sets)+1); use != want {
		add("holds %d chains and sets, want %d", use, want)
	}
	if _, err := c.ListChain(nt, t.MarkerChain()); err != nil {
		add("not built from this config (no chain %s)", t.MarkerChain())
	}
	for _, ch := range t.Chains {
		hc, err := c.ListChain(nt, ch.Name)
		if err != nil {
			add("chain %s missing", ch.Name)
			continue
		}
		if w := ch.nfChain(nt); hc.Type != w.Type || !eqPtr(hc.Hooknum, w.Hooknum) || !eqPtr(hc.Priority, w.Priority) {
			add("chain %s is not a %s chain at %v priority %v", ch.Name, ch.Type, deref(w.Hooknum), deref(w.Priority))
		}
		rules, err := c.GetRules(nt, &nftables.Chain{Name: ch.Name, Table: nt})
		if err != nil {
			return nil, fmt.Errorf("failed to list the rules of chain %s of %s: %w", ch.Name, id, err)
		}
		if len(rules) != len(ch.Rules) {
			add("chain %s has %d rules, want %d", ch.Name, len(rules), len(ch.Rules))
			continue
		}
		for i, r := range ch.Rules {
			if !sameExprs(t.Family, rules[i].Exprs, r.Exprs(t.Family)) {
				add("chain %s rule %d differs from %q", ch.Name, i+1, r)
			}
		}
	}
	sets, err := c.GetSets(nt)
	if err != nil {
		return nil, fmt.Errorf("failed to list the sets of %s: %w", id, err)
	}
	for _, s := range t.Sets {
		i := slices.IndexFunc(sets, func(h *nftables.Set) bool { return h.Name == s.Name })
		if i < 0 {
			add("set %s missing", s.Name)
			continue
		}
		h, w := sets[i], s.nfSet(nt)
		if h.KeyType.GetNFTMagic() != w.KeyType.GetNFTMagic() || h.KeyType.Bytes != w.KeyType.Bytes ||
			h.Interval != w.Interval || h.Concatenation != w.Concatenation {
			add("set %s is not of type %v", s.Name, s.Key)
			continue
		}
		if len(s.Elements) == 0 {
			continue
		}
		elems, err := c.GetSetElements(h)
		if err != nil {
			return nil, fmt.Errorf("failed to read set %s of %s: %w", s.Name, id, err)
		}
		if !sameKeys(elems, s.Elements) {
			add("set %s does not hold its %d static elements", s.Name, len(s.Elements))
		}
	}
	return d, nil
}

// tableUse is the table's use count (its chains, sets, objects and
// flowtables). google/nftables v0.3.0 decodes NFTA_TABLE_USE in host order;
// the kernel sends it in network order.
func tableUse(t *nftables.Table) uint32 {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, t.Use)
	return binary.BigEndian.Uint32(b)
}

func eqPtr[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// sameExprs compares expressions by their netlink encoding; counter values
// are state, not content.
func sameExprs(family nftables.TableFamily, have, want []expr.Any) bool {
	if len(have) != len(want) {
		return false
	}
	for i := range have {
		h := have[i]
		if _, ok := h.(*expr.Counter); ok {
			h = &expr.Counter{}
		}
		hb, err1 := expr.Marshal(byte(family), h)
		wb, err2 := expr.Marshal(byte(family), want[i])
		if err1 != nil || err2 != nil || !bytes.Equal(hb, wb) {
			return false
		}
	}
	return true
}

// sameKeys compares two element lists by key, key end and interval-end flag.
func sameKeys(a, b []nftables.SetElement) bool {
	keys := func(es []nftables.SetElement) []string {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = fmt.Sprintf("%x-%x-%v", e.Key, e.KeyEnd, e.IntervalEnd)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(keys(a), keys(b))
}

// CheckElements verifies that every element of e is in its set (one dump per
// set). An element is named in the error by its set and key bytes.
func CheckElements(c Reader, want []*Table, e Elements) error {
	lost, err := MissingElements(c, want, e)
	if err != nil {
		return err
	}
	for id, sets := range lost {
		for name, elems := range sets {
			return fmt.Errorf("element %x missing from set %s of %s", elems[0].Key, name, id)
		}
	}
	return nil
}

// MissingElements are the elements of e that are not in their sets (one
// dump per set of e), for the tables of want.
func MissingElements(c Reader, want []*Table, e Elements) (Elements, error) {
	lost := Elements{}
	for _, t := range want {
		for name, elems := range e[t.ID()] {
			have, err := c.GetSetElements(t.nfSet(name))
			if err != nil {
				return nil, fmt.Errorf("failed to read set %s of %s: %w", name, t.ID(), err)
			}
			got := make(map[string]bool, len(have))
			for _, h := range have {
				if !h.IntervalEnd {
					got[string(h.Key)] = true
				}
			}
			for _, w := range elems {
				if !got[string(w.Key)] {
					lost.Add(t.ID(), name, w)
				}
			}
		}
	}
	return lost, nil
}

// TableState is one podwire table as Inspect found it.
type TableState struct {
	ID ID
	// Hash is the wanted table's hash; empty for an obsolete table.
	Hash            string
	Wanted, Present bool
	// Drift names what differs from the wanted table (Verify).
	Drift []string
}

// Current reports whether a wanted table is present as wanted.
func (s TableState) Current() bool { return s.Wanted && s.Present && len(s.Drift) == 0 }

// Inspect verifies want and reports the tables of known that are present
// but no longer wanted: what CHECK, STATUS and `podwire status` show, with
// the same reads as Ensure.
func Inspect(c Reader, want []*Table, known []ID) ([]TableState, error) {
	var out []TableState
	wanted := map[ID]bool{}
	for _, t := range want {
		wanted[t.ID()] = true
		d, err := Verify(c, t)
		if err != nil {
			return nil, err
		}
		missing := len(d) == 1 && d[0] == t.ID().String()+": missing"
		out = append(out, TableState{ID: t.ID(), Hash: t.Hash(), Wanted: true, Present: !missing, Drift: d})
	}
	for _, id := range known {
		if wanted[id] {
			continue
		}
		present, err := tablePresent(c, id)
		if err != nil {
			return nil, err
		}
		if present {
			out = append(out, TableState{ID: id, Present: true})
		}
	}
	return out, nil
}
