package nft

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/google/nftables"
)

// Conn is the part of *nftables.Conn podwire uses: the seam through which
// rule generation is tested without root (nftables.WithTestDial).
type Conn interface {
	AddTable(*nftables.Table) *nftables.Table
	DelTable(*nftables.Table)
	AddChain(*nftables.Chain) *nftables.Chain
	AddRule(*nftables.Rule) *nftables.Rule
	AddSet(*nftables.Set, []nftables.SetElement) error
	SetAddElements(*nftables.Set, []nftables.SetElement) error
	SetDeleteElements(*nftables.Set, []nftables.SetElement) error
	ListChains() ([]*nftables.Chain, error)
	ListTables() ([]*nftables.Table, error)
	Flush() error
	GetSetElements(*nftables.Set) ([]nftables.SetElement, error)
}

var _ Conn = (*nftables.Conn)(nil)

// Present is what one chain dump says of podwire's tables: for each table
// present, the names of its chains.
type Present map[ID]map[string]bool

// ReadPresent lists the chains of every podwire table with one netlink dump.
func ReadPresent(c Conn) (Present, error) {
	chains, err := c.ListChains()
	if err != nil {
		return nil, fmt.Errorf("failed to list nftables chains: %w", err)
	}
	p := Present{}
	for _, ch := range chains {
		if ch.Table == nil || !strings.HasPrefix(ch.Table.Name, OwnerPrefix) {
			continue
		}
		id := ID{ch.Table.Family, ch.Table.Name}
		if p[id] == nil {
			p[id] = map[string]bool{}
		}
		p[id][ch.Name] = true
	}
	return p, nil
}

// Current reports whether t is present with its hash and all its chains.
func (p Present) Current(t *Table) bool {
	chains := p[t.ID()]
	if !chains[t.MarkerChain()] {
		return false
	}
	for _, c := range t.Chains {
		if !chains[c.Name] {
			return false
		}
	}
	return true
}

// Stale returns the tables of want that are not current, and the podwire
// tables present that want no longer has (to delete).
func (p Present) Stale(want []*Table) (stale []*Table, obsolete []ID) {
	wanted := map[ID]bool{}
	for _, t := range want {
		wanted[t.ID()] = true
		if !p.Current(t) {
			stale = append(stale, t)
		}
	}
	for id := range p {
		if !wanted[id] {
			obsolete = append(obsolete, id)
		}
	}
	return stale, obsolete
}

// Build queues, into c's batch, the replacement of table t: created if
// absent, deleted, and created anew with its sets (holding elems), chains,
// rules and hash marker. The caller flushes.
func Build(c Conn, t *Table, elems map[string][]nftables.SetElement) error {
	if err := t.Validate(); err != nil {
		return err
	}
	nt := &nftables.Table{Family: t.Family, Name: t.Name}
	// Add (no NLM_F_EXCL: no error if present), then delete, then add: the
	// table is replaced whether or not it existed, inside one transaction.
	c.AddTable(nt)
	c.DelTable(nt)
	c.AddTable(nt)
	sets := make(map[string]*nftables.Set, len(t.Sets))
	for _, s := range t.Sets {
		ns := &nftables.Set{
			Table:         nt,
			Name:          s.Name,
			KeyType:       s.KeyType,
			Interval:      s.Interval,
			Concatenation: s.Concatenation,
			Comment:       s.Comment,
			KeyByteOrder:  s.KeyByteOrder,
		}
		if err := c.AddSet(ns, nil); err != nil {
			return fmt.Errorf("failed to add set %s to %s: %w", s.Name, t.ID(), err)
		}
		all := append(append([]nftables.SetElement(nil), s.Elements...), elems[s.Name]...)
		if len(all) > 0 {
			if err := inChunks(c.SetAddElements, ns, all); err != nil {
				return fmt.Errorf("failed to add elements to set %s of %s: %w", s.Name, t.ID(), err)
			}
		}
		sets[s.Name] = ns
	}
	for _, ch := range t.Chains {
		nc := c.AddChain(&nftables.Chain{
			Name:     ch.Name,
			Table:    nt,
			Type:     ch.Type,
			Hooknum:  ch.Hook,
			Priority: ch.Priority,
			Policy:   ch.Policy,
		})
		for _, r := range ch.Rules {
			c.AddRule(&nftables.Rule{Table: nt, Chain: nc, Exprs: r(sets)})
		}
	}
	c.AddChain(&nftables.Chain{Name: t.MarkerChain(), Table: nt})
	return nil
}

// Delete queues the deletion of a table known to be present.
func Delete(c Conn, id ID) {
	c.DelTable(&nftables.Table{Family: id.Family, Name: id.Name})
}

// Ensure makes the podwire tables match want, touching nothing when they do
// (the common case: one chain dump). Otherwise it takes the node lock, reads
// again, and rebuilds the stale tables and deletes the obsolete ones in one
// atomic batch; elems supplies every attachment's set elements, read under
// the lock. It reports whether it changed anything.
func Ensure(c Conn, want []*Table, lock func() (func(), error), elems func() (Elements, error)) (bool, error) {
	p, err := ReadPresent(c)
	if err != nil {
		return false, err
	}
	if stale, obsolete := p.Stale(want); len(stale) == 0 && len(obsolete) == 0 {
		return false, nil
	}
	unlock, err := lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	if p, err = ReadPresent(c); err != nil {
		return false, err
	}
	stale, obsolete := p.Stale(want)
	if len(stale) == 0 && len(obsolete) == 0 {
		return false, nil // another invocation repaired it while we waited
	}
	all, err := elems()
	if err != nil {
		return false, err
	}
	for _, id := range obsolete {
		Delete(c, id)
	}
	for _, t := range stale {
		if err := Build(c, t, all[t.ID()]); err != nil {
			return false, err
		}
	}
	if err := c.Flush(); err != nil {
		return false, fmt.Errorf("failed to apply podwire tables: %w", err)
	}
	return true, nil
}

// AddElements adds an attachment's elements in one batch. Adding an element
// that exists is not an error.
func AddElements(c Conn, want []*Table, e Elements) error {
	if len(e) == 0 {
		return nil
	}
	for _, t := range want {
		sets := e[t.ID()]
		for name, elems := range sets {
			s := &nftables.Set{Table: &nftables.Table{Family: t.Family, Name: t.Name}, Name: name, KeyType: keyType(t, name)}
			if err := inChunks(c.SetAddElements, s, elems); err != nil {
				return fmt.Errorf("failed to add elements to set %s of %s: %w", name, t.ID(), err)
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("failed to add set elements: %w", err)
	}
	return nil
}

// DeleteElements removes an attachment's elements in one batch, idempotently:
// only in tables that are present, and each element is added before it is
// deleted, so an element that is already gone is not an error.
func DeleteElements(c Conn, e Elements) error {
	if len(e) == 0 {
		return nil
	}
	tables, err := c.ListTables()
	if err != nil {
		return fmt.Errorf("failed to list nftables tables: %w", err)
	}
	present := map[ID]bool{}
	for _, t := range tables {
		present[ID{t.Family, t.Name}] = true
	}
	queued := false
	for id, sets := range e {
		if !present[id] {
			continue // table gone (flushed ruleset): so are its elements
		}
		for name, elems := range sets {
			s := &nftables.Set{Table: &nftables.Table{Family: id.Family, Name: id.Name}, Name: name}
			if err := inChunks(c.SetAddElements, s, elems); err != nil {
				return err
			}
			if err := inChunks(c.SetDeleteElements, s, elems); err != nil {
				return err
			}
			queued = true
		}
	}
	if !queued {
		return nil
	}
	if err := c.Flush(); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil // a set vanished with a rebuild: its elements too
		}
		return fmt.Errorf("failed to delete set elements: %w", err)
	}
	return nil
}

// elementsPerMessage bounds the elements of one NEWSETELEM/DELSETELEM
// message: the element list is one netlink attribute, whose length is 16 bits
// (64 KiB), about 800 elements of "ifname . ipv6_addr" with a comment. More
// would overflow it and the kernel would read a corrupt list. Several messages
// still go in one batch, applied atomically.
const elementsPerMessage = 256

// inChunks queues op for elems, elementsPerMessage at a time.
func inChunks(op func(*nftables.Set, []nftables.SetElement) error, s *nftables.Set, elems []nftables.SetElement) error {
	for i := 0; i < len(elems); i += elementsPerMessage {
		if err := op(s, elems[i:min(i+elementsPerMessage, len(elems))]); err != nil {
			return err
		}
	}
	return nil
}

func keyType(t *Table, set string) nftables.SetDatatype {
	for _, s := range t.Sets {
		if s.Name == set {
			return s.KeyType
		}
	}
	return nftables.TypeInvalid
}

// CheckElements verifies that every element of e is in its set (one dump per
// set). An element is named in the error by its set and key bytes.
func CheckElements(c interface {
	GetSetElements(*nftables.Set) ([]nftables.SetElement, error)
}, want []*Table, e Elements) error {
	for id, sets := range e {
		for name, elems := range sets {
			s := &nftables.Set{Table: &nftables.Table{Family: id.Family, Name: id.Name}, Name: name}
			for _, t := range want {
				if t.ID() == id {
					s.KeyType = keyType(t, name)
					for _, ts := range t.Sets {
						if ts.Name == name {
							s.Interval, s.Concatenation = ts.Interval, ts.Concatenation
						}
					}
				}
			}
			have, err := c.GetSetElements(s)
			if err != nil {
				return fmt.Errorf("failed to read set %s of %s: %w", name, id, err)
			}
			got := make(map[string]bool, len(have))
			for _, h := range have {
				if !h.IntervalEnd {
					got[string(h.Key)] = true
				}
			}
			for _, w := range elems {
				if !got[string(w.Key)] {
					return fmt.Errorf("element %x missing from set %s of %s", w.Key, name, id)
				}
			}
		}
	}
	return nil
}
