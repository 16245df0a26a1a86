// Package nft holds podwire's nftables ruleset as data and applies it over
// netlink with github.com/google/nftables: no nft binary is needed.
//
// The model is kube-proxy's: static chains and rules, dynamic sets. A Table
// describes one podwire-owned table (its name starts with "podwire"); the
// per-pod state is set elements, never a rule per pod. Each table carries a
// hash of its own description, so a changed config or a newer podwire is seen
// with one netlink read (Ensure) and repaired by rebuilding the table in one
// atomic batch, set elements re-added from the attachment records.
//
// Where the hash lives: google/nftables v0.3.0 does not expose table userdata
// (NFTA_TABLE_USERDATA), so the hash is the name of an empty regular chain,
// "config-<hash>", in each table. `nft list ruleset` shows it, and a single
// chain dump (ListChains) tells both that a table exists with all its chains
// and which configuration built it.
package nft

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
)

// OwnerPrefix starts the name of every table podwire owns; podwire creates,
// changes and deletes no other table.
const OwnerPrefix = "podwire"

// markerPrefix starts the name of the chain that carries a table's hash.
const markerPrefix = "config-"

// rulesetVersion is folded into every hash, so that a podwire upgrade that
// changes rule encoding rebuilds the tables even with the same config.
const rulesetVersion = "podwire-ruleset/1"

// Set describes a named set of a table.
type Set struct {
	Name          string
	KeyType       nftables.SetDatatype
	Interval      bool
	Concatenation bool
	Comment       string
	// Elements are static elements from the config (an interval set of
	// excepted CIDRs, say), laid down with the set and part of the hash;
	// per-pod elements come from the records instead.
	Elements []nftables.SetElement
	// KeyByteOrder is written to the set's userdata for nft(8)'s listing:
	// binaryutil.NativeEndian for string keys (ifname), so that `nft list`
	// shows "eth0" and not "".
	KeyByteOrder binaryutil.ByteOrder
}

// RuleFunc builds one rule's expressions. sets gives the table's sets as
// added to the current batch (their IDs are needed by set lookups).
type RuleFunc func(sets map[string]*nftables.Set) []expr.Any

// Chain describes a chain: a base chain when Hook is set, else a regular one.
type Chain struct {
	Name     string
	Type     nftables.ChainType
	Hook     *nftables.ChainHook
	Priority *nftables.ChainPriority
	Policy   *nftables.ChainPolicy
	Rules    []RuleFunc
}

// Table describes one podwire-owned table.
type Table struct {
	Family nftables.TableFamily
	Name   string
	Sets   []Set
	Chains []Chain
}

// ID names a table across families: "inet podwire".
type ID struct {
	Family nftables.TableFamily
	Name   string
}

func (id ID) String() string { return FamilyName(id.Family) + " " + id.Name }

// ID returns the table's identity.
func (t *Table) ID() ID { return ID{t.Family, t.Name} }

// FamilyName is the nft(8) spelling of a table family.
func FamilyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyARP:
		return "arp"
	case nftables.TableFamilyNetdev:
		return "netdev"
	}
	return fmt.Sprintf("family-%d", f)
}

// Validate checks that the table is one podwire may own.
func (t *Table) Validate() error {
	if !strings.HasPrefix(t.Name, OwnerPrefix) {
		return fmt.Errorf("table %q is not podwire's: names must start with %q", t.Name, OwnerPrefix)
	}
	return nil
}

// Hash is a short digest of the table's description: family, name, sets,
// chains and every rule's expressions, plus the ruleset version.
func (t *Table) Hash() string {
	placeholder := make(map[string]*nftables.Set, len(t.Sets))
	for _, s := range t.Sets {
		placeholder[s.Name] = &nftables.Set{Name: s.Name}
	}
	type chainDesc struct {
		Name, Type     string
		Hook, Priority *int64
		Policy         *uint32
		Rules          [][]string
	}
	desc := struct {
		Version, Family, Name string
		Sets                  []Set
		Chains                []chainDesc
	}{rulesetVersion, FamilyName(t.Family), t.Name, t.Sets, nil}
	for _, c := range t.Chains {
		cd := chainDesc{Name: c.Name, Type: string(c.Type)}
		if c.Hook != nil {
			h := int64(*c.Hook)
			cd.Hook = &h
		}
		if c.Priority != nil {
			p := int64(*c.Priority)
			cd.Priority = &p
		}
		if c.Policy != nil {
			p := uint32(*c.Policy)
			cd.Policy = &p
		}
		for _, r := range c.Rules {
			var exprs []string
			for _, e := range r(placeholder) {
				b, _ := json.Marshal(e)
				exprs = append(exprs, fmt.Sprintf("%T%s", e, b))
			}
			cd.Rules = append(cd.Rules, exprs)
		}
		desc.Chains = append(desc.Chains, cd)
	}
	b, err := json.Marshal(desc)
	if err != nil {
		panic(fmt.Sprintf("nft: cannot hash table %s: %v", t.Name, err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// MarkerChain is the name of the chain carrying the table's hash.
func (t *Table) MarkerChain() string { return markerPrefix + t.Hash() }

// Elements are set elements by table and set name.
type Elements map[ID]map[string][]nftables.SetElement

// Add appends elems to set in table id.
func (e Elements) Add(id ID, set string, elems ...nftables.SetElement) {
	if len(elems) == 0 {
		return
	}
	if e[id] == nil {
		e[id] = make(map[string][]nftables.SetElement)
	}
	e[id][set] = append(e[id][set], elems...)
}

// Merge adds every element of o to e.
func (e Elements) Merge(o Elements) {
	for id, sets := range o {
		for name, elems := range sets {
			e.Add(id, name, elems...)
		}
	}
}
