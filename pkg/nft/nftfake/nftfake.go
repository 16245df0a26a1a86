// Package nftfake is an in-memory nft.Conn for tests without root: a batch is
// queued and applied at Flush, all or nothing, as the kernel applies a
// transaction, and reads answer from what was applied. It keeps what
// nft.Verify compares (chains with their hook and priority, rules as
// expressions, sets with their key type, elements by key); it does not
// evaluate rules. A missing object is unix.ENOENT, as from the kernel.
package nftfake

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/pkg/nft"
)

// Conn is the fake connection. The zero value is an empty ruleset.
type Conn struct {
	tables  map[nft.ID]*table
	pending []func(map[nft.ID]*table) error
	// Flushes counts the batches applied.
	Flushes int
}

var _ nft.Conn = (*Conn)(nil)

type table struct {
	chains map[string]*nftables.Chain
	order  []string // chain names in order of creation
	rules  map[string][][]expr.Any
	sets   map[string]*nftables.Set
	elems  map[string][]nftables.SetElement
}

func idOf(t *nftables.Table) nft.ID { return nft.ID{Family: t.Family, Name: t.Name} }

func notFound(what string) error { return fmt.Errorf("%s: %w", what, unix.ENOENT) }

func (c *Conn) queue(op func(map[nft.ID]*table) error) { c.pending = append(c.pending, op) }

// Flush applies the queued batch to a copy and keeps it only when every
// operation succeeded.
func (c *Conn) Flush() error {
	ops := c.pending
	c.pending = nil
	next := clone(c.tables)
	for _, op := range ops {
		if err := op(next); err != nil {
			return err
		}
	}
	c.tables = next
	c.Flushes++
	return nil
}

func clone(in map[nft.ID]*table) map[nft.ID]*table {
	out := make(map[nft.ID]*table, len(in))
	for id, t := range in {
		n := &table{chains: map[string]*nftables.Chain{}, order: slices.Clone(t.order),
			rules: map[string][][]expr.Any{}, sets: map[string]*nftables.Set{}, elems: map[string][]nftables.SetElement{}}
		for k, v := range t.chains {
			n.chains[k] = v
		}
		for k, v := range t.rules {
			n.rules[k] = slices.Clone(v)
		}
		for k, v := range t.sets {
			n.sets[k] = v
		}
		for k, v := range t.elems {
			n.elems[k] = slices.Clone(v)
		}
		out[id] = n
	}
	return out
}

// AddTable queues the creation of t; an existing table is kept.
func (c *Conn) AddTable(t *nftables.Table) *nftables.Table {
	id := idOf(t)
	c.queue(func(m map[nft.ID]*table) error {
		if m[id] == nil {
			m[id] = &table{chains: map[string]*nftables.Chain{}, rules: map[string][][]expr.Any{},
				sets: map[string]*nftables.Set{}, elems: map[string][]nftables.SetElement{}}
		}
		return nil
	})
	return t
}

// DelTable queues the deletion of t with everything in it.
func (c *Conn) DelTable(t *nftables.Table) {
	id := idOf(t)
	c.queue(func(m map[nft.ID]*table) error {
		if m[id] == nil {
			return notFound("table " + id.String())
		}
		delete(m, id)
		return nil
	})
}

func (c *Conn) inTable(t *nftables.Table, op func(*table) error) {
	id := idOf(t)
	c.queue(func(m map[nft.ID]*table) error {
		if m[id] == nil {
			return notFound("table " + id.String())
		}
		return op(m[id])
	})
}

// AddChain queues the creation of ch.
func (c *Conn) AddChain(ch *nftables.Chain) *nftables.Chain {
	cp := *ch
	c.inTable(ch.Table, func(t *table) error {
		if t.chains[cp.Name] == nil {
			t.order = append(t.order, cp.Name)
		}
		t.chains[cp.Name] = &cp
		return nil
	})
	return ch
}

// AddRule queues r at the end of its chain.
func (c *Conn) AddRule(r *nftables.Rule) *nftables.Rule {
	name, exprs := r.Chain.Name, r.Exprs
	c.inTable(r.Table, func(t *table) error {
		if t.chains[name] == nil {
			return notFound("chain " + name)
		}
		t.rules[name] = append(t.rules[name], exprs)
		return nil
	})
	return r
}

// AddSet queues the creation of s holding elems.
func (c *Conn) AddSet(s *nftables.Set, elems []nftables.SetElement) error {
	cp := *s
	elems = slices.Clone(elems)
	c.inTable(s.Table, func(t *table) error {
		t.sets[cp.Name] = &cp
		t.elems[cp.Name] = append(t.elems[cp.Name], elems...)
		return nil
	})
	return nil
}

// SetAddElements queues elems into s; an element that is there stays once.
func (c *Conn) SetAddElements(s *nftables.Set, elems []nftables.SetElement) error {
	c.eachElement(s, elems, func(have []nftables.SetElement, e nftables.SetElement) ([]nftables.SetElement, error) {
		if slices.ContainsFunc(have, sameAs(e)) {
			return have, nil
		}
		return append(have, e), nil
	})
	return nil
}

// SetDeleteElements queues the removal of elems from s; an element that is
// not there fails the batch, as in the kernel.
func (c *Conn) SetDeleteElements(s *nftables.Set, elems []nftables.SetElement) error {
	name := s.Name
	c.eachElement(s, elems, func(have []nftables.SetElement, e nftables.SetElement) ([]nftables.SetElement, error) {
		i := slices.IndexFunc(have, sameAs(e))
		if i < 0 {
			return nil, notFound(fmt.Sprintf("element %x of set %s", e.Key, name))
		}
		return slices.Delete(have, i, i+1), nil
	})
	return nil
}

// eachElement queues op over a copy of elems, one element at a time, on
// the elements of set s, which op returns changed; a missing set or an
// error of op fails the batch.
func (c *Conn) eachElement(s *nftables.Set, elems []nftables.SetElement, op func(have []nftables.SetElement, e nftables.SetElement) ([]nftables.SetElement, error)) {
	name, elems := s.Name, slices.Clone(elems)
	c.inTable(s.Table, func(t *table) error {
		if t.sets[name] == nil {
			return notFound("set " + name)
		}
		for _, e := range elems {
			have, err := op(t.elems[name], e)
			if err != nil {
				return err
			}
			t.elems[name] = have
		}
		return nil
	})
}

// sameAs matches the elements equal to e in key, key end and interval end.
func sameAs(e nftables.SetElement) func(nftables.SetElement) bool {
	return func(h nftables.SetElement) bool {
		return string(h.Key) == string(e.Key) && string(h.KeyEnd) == string(e.KeyEnd) && h.IntervalEnd == e.IntervalEnd
	}
}

// ListTables returns every table.
func (c *Conn) ListTables() ([]*nftables.Table, error) {
	var out []*nftables.Table
	for id := range c.tables {
		out = append(out, &nftables.Table{Family: id.Family, Name: id.Name})
	}
	return out, nil
}

// ListTableOfFamily returns the table with its use count (chains and sets),
// encoded as the kernel sends it (network order, which google/nftables
// v0.3.0 decodes in host order).
func (c *Conn) ListTableOfFamily(name string, family nftables.TableFamily) (*nftables.Table, error) {
	id := nft.ID{Family: family, Name: name}
	t := c.tables[id]
	if t == nil {
		return nil, notFound("table " + id.String())
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(len(t.chains)+len(t.sets)))
	return &nftables.Table{Family: family, Name: name, Use: binary.NativeEndian.Uint32(b)}, nil
}

// ListChain returns chain name of t.
func (c *Conn) ListChain(t *nftables.Table, name string) (*nftables.Chain, error) {
	if tt := c.tables[idOf(t)]; tt != nil && tt.chains[name] != nil {
		cp := *tt.chains[name]
		return &cp, nil
	}
	return nil, notFound("chain " + name)
}

// GetRules returns the rules of ch.
func (c *Conn) GetRules(t *nftables.Table, ch *nftables.Chain) ([]*nftables.Rule, error) {
	tt := c.tables[idOf(t)]
	if tt == nil || tt.chains[ch.Name] == nil {
		return nil, notFound("chain " + ch.Name)
	}
	var out []*nftables.Rule
	for _, e := range tt.rules[ch.Name] {
		out = append(out, &nftables.Rule{Table: t, Chain: ch, Exprs: e})
	}
	return out, nil
}

// GetSets returns the sets of t.
func (c *Conn) GetSets(t *nftables.Table) ([]*nftables.Set, error) {
	tt := c.tables[idOf(t)]
	if tt == nil {
		return nil, notFound("table " + idOf(t).String())
	}
	var out []*nftables.Set
	for _, s := range tt.sets {
		cp := *s
		out = append(out, &cp)
	}
	return out, nil
}

// GetSetElements returns the elements of s.
func (c *Conn) GetSetElements(s *nftables.Set) ([]nftables.SetElement, error) {
	tt := c.tables[idOf(s.Table)]
	if tt == nil || tt.sets[s.Name] == nil {
		return nil, notFound("set " + s.Name)
	}
	return slices.Clone(tt.elems[s.Name]), nil
}

// Elements returns the elements of every set of every table, for tests to
// compare with what an attachment should have added.
func (c *Conn) Elements() nft.Elements {
	out := nft.Elements{}
	for id, t := range c.tables {
		for name, els := range t.elems {
			for _, e := range els {
				out.Add(id, name, e)
			}
		}
	}
	return out
}

// FlushChain empties a chain behind podwire's back, as `nft flush chain`.
func (c *Conn) FlushChain(id nft.ID, chain string) {
	if t := c.tables[id]; t != nil {
		t.rules[chain] = nil
	}
}

// Discard drops the queued batch, as the kernel does with a batch it
// refused.
func (c *Conn) Discard() { c.pending = nil }
