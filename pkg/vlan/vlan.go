// Package vlan parses and prints sets of IEEE 802.1Q VLAN IDs, as written in
// podwire's config (allowedVLANs, vlanTrunk) and annotations
// (podwire.io/vlan-trunk): a comma list of IDs and inclusive ranges,
// "100-199,300". Valid IDs are 1..4094 (IEEE 802.1Q-2018, 9.6: 0 and 4095 are
// reserved).
package vlan

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// MinID and MaxID bound a usable VLAN ID.
const (
	MinID = 1
	MaxID = 4094
)

// Set is a sorted list of distinct VLAN IDs. The zero value is the empty set.
type Set []uint16

// ParseID parses one VLAN ID in 1..4094, decimal digits only (no sign).
func ParseID(s string) (uint16, error) {
	n, err := vlanIDs.ParseID(s)
	return uint16(n), err
}

var vlanIDs = IDRange{List: "VLAN", ID: "VLAN ID", Min: MinID, Max: MaxID}

// IDRange is a kind of small integer ID written in lists with ranges, as
// VLAN IDs are ("100-199,300"): VRRP's virtual router IDs use the same
// syntax. List and ID name them in errors ("VLAN", "VLAN ID").
type IDRange struct {
	List, ID string
	Min, Max int
}

// ParseID parses one ID in r.Min..r.Max, decimal digits only (no sign).
func (r IDRange) ParseID(s string) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	if err != nil || s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a %s", s, r.ID)
	}
	if n < r.Min || n > r.Max {
		return 0, fmt.Errorf("%s %d is out of range %d-%d", r.ID, n, r.Min, r.Max)
	}
	return n, nil
}

// Parse parses a comma list of IDs and inclusive ranges into the sorted,
// distinct IDs. Blanks around items are ignored; an empty string is the
// empty list. An empty item, a range whose end is below its start
// ("300-200") and an ID out of range are errors.
func (r IDRange) Parse(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	seen := make(map[int]bool)
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("empty item in %s list %q", r.List, s)
		}
		lo, hi, isRange := strings.Cut(item, "-")
		first, err := r.ParseID(lo)
		if err != nil {
			return nil, err
		}
		last := first
		if isRange {
			if last, err = r.ParseID(hi); err != nil {
				return nil, err
			}
			if last < first {
				return nil, fmt.Errorf("%s range %q is reversed", r.List, item)
			}
		}
		for id := first; id <= last; id++ {
			seen[id] = true
		}
	}
	ids := make([]int, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids, nil
}

// ParseList is r.Parse into a list of S's own ID type (Set, vrrp.IDs); nil
// for the empty list.
func ParseList[S ~[]E, E ~uint8 | ~uint16](r IDRange, s string) (S, error) {
	ids, err := r.Parse(s)
	if err != nil || ids == nil {
		return nil, err
	}
	out := make(S, len(ids))
	for i, id := range ids {
		out[i] = E(id)
	}
	return out, nil
}

// Parse parses a comma list of VLAN IDs and inclusive ranges ("100-199,300").
// Blanks around items are ignored; an empty string is the empty set. A range
// whose end is below its start ("300-200") and an ID outside 1..4094 are errors.
func Parse(s string) (Set, error) { return ParseList[Set](vlanIDs, s) }

// Contains reports whether id is in s.
func (s Set) Contains(id uint16) bool {
	i := sort.Search(len(s), func(i int) bool { return s[i] >= id })
	return i < len(s) && s[i] == id
}

// Missing returns the IDs of other that are not in s, in order.
func (s Set) Missing(other Set) Set {
	var out Set
	for _, id := range other {
		if !s.Contains(id) {
			out = append(out, id)
		}
	}
	return out
}

// String prints s compactly with ranges, the inverse of Parse: "100-199,300".
func (s Set) String() string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			fmt.Fprintf(&b, "%d", s[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", s[i], s[j])
		}
		i = j + 1
	}
	return b.String()
}
