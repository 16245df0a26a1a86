// Package nft holds podwire's nftables ruleset as data and applies it over
// netlink with github.com/google/nftables: no nft binary is needed.
//
// The model is kube-proxy's: static chains and rules, dynamic sets. A Table
// describes one podwire-owned table (its name starts with "podwire"): sets
// with typed keys, base chains {name, type, hook, priority}, rules built from
// a small vocabulary of statements (stmt.go) that yield both the netlink
// expressions and the nft(8) text. A table renders (Text) exactly as `nft -s
// list table` prints it; its hash is a digest of that text, so the hash
// changes when what the kernel would hold changes, and not when a library
// changes how it spells its structs.
//
// The per-pod state is set elements, never a rule per pod. Verify compares a
// table with the kernel's by content (chains, rules, sets, static elements),
// reading only podwire's objects; Ensure rebuilds what differs in one atomic
// batch, set elements re-added from the attachment records.
//
// Where the hash lives: google/nftables v0.3.0 does not expose table userdata
// (NFTA_TABLE_USERDATA), so the hash is the name of an empty regular chain,
// "config-<hash>", in each table.
package nft

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
)

// OwnerPrefix starts the name of every table podwire owns; podwire creates,
// changes and deletes no other table.
const OwnerPrefix = "podwire"

// markerPrefix starts the name of the chain that carries a table's hash.
const markerPrefix = "config-"

// rulesetVersion is folded into every hash, so that a podwire upgrade that
// changes how the same text is encoded still rebuilds the tables.
const rulesetVersion = "podwire-ruleset/2"

// KeyType is one field of a set key: its nft(8) name, its datatype and its
// length in bytes.
type KeyType struct {
	name string
	dt   nftables.SetDatatype
	len  int
}

// Key types podwire's sets use.
var (
	TypeIFName    = KeyType{"ifname", nftables.TypeIFName, ifNameSize}
	TypeIPv4Addr  = KeyType{"ipv4_addr", nftables.TypeIPAddr, 4}
	TypeIPv6Addr  = KeyType{"ipv6_addr", nftables.TypeIP6Addr, 16}
	TypeEtherAddr = KeyType{"ether_addr", nftables.TypeEtherAddr, 6}
)

func (k KeyType) String() string { return k.name }

// Set describes a named set of a table.
type Set struct {
	Name string
	// Key is the key's fields, one for a plain set, several for a
	// concatenation ("ifname . ipv4_addr").
	Key      []KeyType
	Interval bool
	// Counter gives every element a counter of its own (nft's "counter"
	// set flag; the kernel attaches one to each element as it is added, so
	// adding a pod's element costs what it did without). A non-inverted
	// lookup of the element counts the packet it matched.
	Counter bool
	Comment string
	// Elements are static elements from the config (an interval set of
	// excepted CIDRs, say), laid down with the set and part of the hash;
	// per-pod elements come from the records instead.
	Elements []nftables.SetElement
}

// Chain describes a chain: a base chain when Hook is set, else a regular one.
// A base chain's policy is accept.
type Chain struct {
	Name     string
	Type     nftables.ChainType
	Hook     *nftables.ChainHook
	Priority *nftables.ChainPriority
	Rules    []Rule
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

// Hash is a short digest of the table's text without per-pod elements and
// without the marker chain, plus the ruleset version.
func (t *Table) Hash() string {
	sum := sha256.Sum256([]byte(rulesetVersion + "\n" + t.render(nil, false)))
	return hex.EncodeToString(sum[:8])
}

// MarkerChain is the name of the chain carrying the table's hash.
func (t *Table) MarkerChain() string { return markerPrefix + t.Hash() }

// Text renders the table with elems (per-pod elements by set name, added
// after the static ones) as `nft -s list table` prints it on nftables 1.0:
// counters without values, elements of a set on one line, interval sets
// sorted. A hash set's elements print in the kernel's order, so compare
// text with a kernel only for sets of at most one per-pod element.
func (t *Table) Text(elems map[string][]nftables.SetElement) string {
	return t.render(elems, true)
}

func (t *Table) render(elems map[string][]nftables.SetElement, marker bool) string {
	var blocks []string
	for _, s := range t.Sets {
		var b strings.Builder
		fmt.Fprintf(&b, "\tset %s {\n", s.Name)
		names := make([]string, len(s.Key))
		for i, k := range s.Key {
			names[i] = k.name
		}
		fmt.Fprintf(&b, "\t\ttype %s\n", strings.Join(names, " . "))
		if s.Interval {
			b.WriteString("\t\tflags interval\n")
		}
		if s.Counter {
			b.WriteString("\t\tcounter\n")
		}
		if s.Comment != "" {
			fmt.Fprintf(&b, "\t\tcomment %q\n", s.Comment)
		}
		all := append(slices.Clone(s.Elements), elems[s.Name]...)
		if len(all) > 0 {
			fmt.Fprintf(&b, "\t\telements = { %s }\n", strings.Join(s.elementTexts(all), ", "))
		}
		b.WriteString("\t}\n")
		blocks = append(blocks, b.String())
	}
	for _, c := range t.Chains {
		var b strings.Builder
		fmt.Fprintf(&b, "\tchain %s {\n", c.Name)
		if c.Hook != nil {
			fmt.Fprintf(&b, "\t\ttype %s hook %s priority %s; policy accept;\n",
				c.Type, hookName(*c.Hook), priorityName(t.Family, *c.Priority))
		}
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "\t\t%s\n", r)
		}
		b.WriteString("\t}\n")
		blocks = append(blocks, b.String())
	}
	if marker {
		blocks = append(blocks, fmt.Sprintf("\tchain %s {\n\t}\n", t.MarkerChain()))
	}
	return fmt.Sprintf("table %s %s {\n%s}\n", FamilyName(t.Family), t.Name, strings.Join(blocks, "\n"))
}

func hookName(h nftables.ChainHook) string {
	switch h {
	case *nftables.ChainHookPrerouting:
		return "prerouting"
	case *nftables.ChainHookInput:
		return "input"
	case *nftables.ChainHookForward:
		return "forward"
	case *nftables.ChainHookOutput:
		return "output"
	case *nftables.ChainHookPostrouting:
		return "postrouting"
	}
	return fmt.Sprintf("%d", h)
}

// priorityName spells a priority as nft(8) does: the standard name of the
// family within 10 of it ("srcnat - 1"), else the number.
func priorityName(f nftables.TableFamily, p nftables.ChainPriority) string {
	type named struct {
		name string
		p    *nftables.ChainPriority
	}
	std := []named{
		{"raw", nftables.ChainPriorityRaw}, {"mangle", nftables.ChainPriorityMangle},
		{"dstnat", nftables.ChainPriorityNATDest}, {"filter", nftables.ChainPriorityFilter},
		{"security", nftables.ChainPrioritySecurity}, {"srcnat", nftables.ChainPriorityNATSource},
	}
	if f == nftables.TableFamilyBridge {
		std = []named{{"dstnat", BridgePriorityDstNAT}, {"filter", BridgePriorityFilter}, {"out", BridgePriorityOut}, {"srcnat", BridgePrioritySrcNAT}}
	}
	for _, s := range std {
		switch d := int(p) - int(*s.p); {
		case d == 0:
			return s.name
		case d > 0 && d <= 10:
			return fmt.Sprintf("%s + %d", s.name, d)
		case d < 0 && d >= -10:
			return fmt.Sprintf("%s - %d", s.name, -d)
		}
	}
	return fmt.Sprintf("%d", p)
}

// The bridge family's standard priorities (enum nf_br_hook_priorities),
// which google/nftables v0.3.0 does not define.
var (
	BridgePriorityDstNAT = nftables.ChainPriorityRef(-300) // NF_BR_PRI_NAT_DST_BRIDGED
	BridgePriorityFilter = nftables.ChainPriorityRef(-200) // NF_BR_PRI_FILTER_BRIDGED
	BridgePriorityOut    = nftables.ChainPriorityRef(100)  // NF_BR_PRI_FILTER_OTHER
	BridgePrioritySrcNAT = nftables.ChainPriorityRef(300)  // NF_BR_PRI_NAT_SRC
)

// nfSet is the set as google/nftables sends it.
func (s Set) nfSet(t *nftables.Table) *nftables.Set {
	ns := &nftables.Set{Table: t, Name: s.Name, Interval: s.Interval, Counter: s.Counter, Comment: s.Comment}
	if len(s.Key) == 1 {
		ns.KeyType = s.Key[0].dt
		if s.Key[0] == TypeIFName {
			// A string key: the byte order in the set's userdata makes
			// nft(8) print "eth0" and not "".
			ns.KeyByteOrder = binaryutil.NativeEndian
		}
	} else {
		dts := make([]nftables.SetDatatype, len(s.Key))
		for i, k := range s.Key {
			dts[i] = k.dt
		}
		ns.KeyType = nftables.MustConcatSetType(dts...)
		ns.Concatenation = true
	}
	return ns
}

// elementTexts prints elements as nft(8) does: fields joined by " . ",
// intervals as a prefix where they are one, an element comment after.
func (s Set) elementTexts(elems []nftables.SetElement) []string {
	concat := len(s.Key) > 1
	var out []string
	if s.Interval && !concat {
		// start, end-exclusive pairs; nft prints them sorted.
		elems = slices.Clone(elems)
		var starts []nftables.SetElement
		ends := map[int]netip.Addr{}
		for _, e := range elems {
			if !e.IntervalEnd {
				starts = append(starts, e)
			}
		}
		slices.SortFunc(starts, func(a, b nftables.SetElement) int { return addrOf(a.Key).Compare(addrOf(b.Key)) })
		for i, st := range starts {
			first := addrOf(st.Key)
			last := lastAddr(first)
			for _, e := range elems {
				if a := addrOf(e.Key); e.IntervalEnd && a.Compare(first) > 0 && (!ends[i].IsValid() || a.Compare(ends[i]) < 0) {
					ends[i] = a
				}
			}
			if end, ok := ends[i]; ok {
				last = end.Prev()
			}
			out = append(out, rangeText(first, last)+s.counterText()+commentText(st.Comment))
		}
		return out
	}
	for _, e := range elems {
		var fields []string
		off := 0
		for _, k := range s.Key {
			n := k.len
			if concat {
				n = (n + 3) &^ 3
			}
			first := k.format(e.Key[off : off+k.len])
			if s.Interval && len(e.KeyEnd) >= off+k.len {
				if l := k.format(e.KeyEnd[off : off+k.len]); l != first {
					first = rangeText(addrOf(e.Key[off:off+k.len]), addrOf(e.KeyEnd[off:off+k.len]))
				}
			}
			fields = append(fields, first)
			off += n
		}
		out = append(out, strings.Join(fields, " . ")+s.counterText()+commentText(e.Comment))
	}
	return out
}

// counterText is what `nft -s` prints after an element of a counter set
// (the values left out, as for rules).
func (s Set) counterText() string {
	if !s.Counter {
		return ""
	}
	return " counter"
}

func commentText(c string) string {
	if c == "" {
		return ""
	}
	return fmt.Sprintf(" comment %q", c)
}

func (k KeyType) format(b []byte) string {
	switch k {
	case TypeIFName:
		return fmt.Sprintf("%q", strings.TrimRight(string(b), "\x00"))
	case TypeEtherAddr:
		return net.HardwareAddr(b).String()
	}
	return addrOf(b).String()
}

func addrOf(b []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(b)
	return a
}

// lastAddr is the highest address of a's family.
func lastAddr(a netip.Addr) netip.Addr {
	b := a.AsSlice()
	for i := range b {
		b[i] = 0xff
	}
	return addrOf(b)
}

// rangeText is "10.0.0.0/8" when first-last is a prefix, else
// "10.0.0.0-11.0.0.255".
func rangeText(first, last netip.Addr) string {
	for bits := 0; bits <= first.BitLen(); bits++ {
		p := netip.PrefixFrom(first, bits)
		if p.Masked().Addr() != first {
			continue
		}
		if f, l := PrefixRange(p); f == first && l == last {
			if bits == first.BitLen() {
				return first.String()
			}
			return p.String()
		}
	}
	return first.String() + "-" + last.String()
}

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
