package nft

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/google/nftables"
)

// Conn is the part of *nftables.Conn podwire uses: the seam through which
// rule generation is tested without root (nftables.WithTestDial). Every read
// names podwire's own objects: a table and a chain by name, the rules of
// one chain, the sets of one table. Nothing dumps the node's whole ruleset.
type Conn interface {
	Reader
	AddTable(*nftables.Table) *nftables.Table
	DelTable(*nftables.Table)
	AddChain(*nftables.Chain) *nftables.Chain
	AddRule(*nftables.Rule) *nftables.Rule
	AddSet(*nftables.Set, []nftables.SetElement) error
	SetAddElements(*nftables.Set, []nftables.SetElement) error
	SetDeleteElements(*nftables.Set, []nftables.SetElement) error
	Flush() error
	// ListTables dumps the tables (not chains) of every family: STATUS
	// probes whether nftables is usable with it.
	ListTables() ([]*nftables.Table, error)
}

var _ Conn = (*nftables.Conn)(nil)

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
	for _, s := range t.Sets {
		ns := s.nfSet(nt)
		if err := c.AddSet(ns, nil); err != nil {
			return fmt.Errorf("failed to add set %s to %s: %w", s.Name, t.ID(), err)
		}
		// Static elements, then the pods' (not copied into one slice:
		// at 1000 pods that is thousands of elements).
		for _, all := range [][]nftables.SetElement{s.Elements, elems[s.Name]} {
			if err := inChunks(c.SetAddElements, ns, all); err != nil {
				return fmt.Errorf("failed to add elements to set %s of %s: %w", s.Name, t.ID(), err)
			}
		}
	}
	for _, ch := range t.Chains {
		nc := c.AddChain(ch.nfChain(nt))
		for _, r := range ch.Rules {
			c.AddRule(&nftables.Rule{Table: nt, Chain: nc, Exprs: r.Exprs(t.Family)})
		}
	}
	c.AddChain(&nftables.Chain{Name: t.MarkerChain(), Table: nt})
	return nil
}

func (ch Chain) nfChain(t *nftables.Table) *nftables.Chain {
	nc := &nftables.Chain{Name: ch.Name, Table: t}
	if ch.Hook != nil {
		accept := nftables.ChainPolicyAccept
		nc.Type, nc.Hooknum, nc.Priority, nc.Policy = ch.Type, ch.Hook, ch.Priority, &accept
	}
	return nc
}

// Report says what Ensure found and did.
type Report struct {
	// Drift names what differed, per table ("inet podwire: chain
	// filter-prerouting has 0 rules, want 8"), before the repair.
	Drift []string
	// Rebuilt and Deleted are the tables rebuilt and the obsolete ones
	// deleted.
	Rebuilt, Deleted []ID
}

// Changed reports whether Ensure changed anything.
func (r Report) Changed() bool { return len(r.Rebuilt)+len(r.Deleted) > 0 }

// Ensure makes podwire's tables match want, touching nothing when they do
// (the common case: Verify of each table, a few netlink reads per chain,
// none of them proportional to the pods or to other owners' rulesets).
// Tables of known that want does not hold are obsolete and deleted when
// present. When anything differs it takes the node lock, verifies again,
// and rebuilds the differing tables and deletes the obsolete ones in one
// atomic batch; elems supplies every attachment's set elements, read under
// the lock.
//
// Ensure verifies chains, rules, sets and static elements; the per-pod
// elements of a table that is current are not read (CheckElements does it
// for one pod, MissingElements for all).
func Ensure(c Conn, want []*Table, known []ID, lock func() (func(), error), elems func() (Elements, error)) (Report, error) {
	stale, obsolete, drift, err := diff(c, want, known)
	if err != nil || len(stale)+len(obsolete) == 0 {
		return Report{}, err
	}
	unlock, err := lock()
	if err != nil {
		return Report{}, err
	}
	defer unlock()
	if stale, obsolete, drift, err = diff(c, want, known); err != nil || len(stale)+len(obsolete) == 0 {
		return Report{}, err // another invocation repaired it while we waited
	}
	all, err := elems()
	if err != nil {
		return Report{}, err
	}
	rep := Report{Drift: drift, Deleted: obsolete}
	for _, id := range obsolete {
		c.DelTable(&nftables.Table{Family: id.Family, Name: id.Name})
	}
	for _, t := range stale {
		if err := Build(c, t, all[t.ID()]); err != nil {
			return Report{}, err
		}
		rep.Rebuilt = append(rep.Rebuilt, t.ID())
	}
	if err := c.Flush(); err != nil {
		return Report{}, fmt.Errorf("failed to apply podwire tables: %w", err)
	}
	return rep, nil
}

// diff verifies want and looks up the obsolete tables of known.
func diff(c Reader, want []*Table, known []ID) (stale []*Table, obsolete []ID, drift []string, err error) {
	states, err := Inspect(c, want, known)
	if err != nil {
		return nil, nil, nil, err
	}
	for i, s := range states {
		switch {
		case !s.Wanted:
			obsolete = append(obsolete, s.ID)
			drift = append(drift, s.ID.String()+": obsolete")
		case len(s.Drift) > 0:
			stale = append(stale, want[i])
			drift = append(drift, s.Drift...)
		}
	}
	return stale, obsolete, drift, nil
}

// AddElements adds an attachment's elements in one batch. Adding an element
// that exists is not an error.
func AddElements(c Conn, want []*Table, e Elements) error {
	if len(e) == 0 {
		return nil
	}
	for _, t := range want {
		for name, elems := range e[t.ID()] {
			s := t.nfSet(name)
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

// nfSet is set name of t as google/nftables addresses it.
func (t *Table) nfSet(name string) *nftables.Set {
	nt := &nftables.Table{Family: t.Family, Name: t.Name}
	for _, s := range t.Sets {
		if s.Name == name {
			return s.nfSet(nt)
		}
	}
	return &nftables.Set{Table: nt, Name: name}
}

// DeleteElements removes an attachment's elements in one batch, idempotently:
// only in tables that are present (one GET by name each), and each element is
// added before it is deleted, so an element that is already gone is not an
// error.
func DeleteElements(c Conn, e Elements) error {
	queued := false
	for id, sets := range e {
		present, err := tablePresent(c, id)
		if err != nil {
			return err
		}
		if !present {
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
