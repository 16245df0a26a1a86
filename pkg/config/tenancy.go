package config

import (
	"fmt"
	"net/netip"
	"path"
	"slices"

	"github.com/podwire/podwire/pkg/vlan"
	"github.com/podwire/podwire/pkg/vrrp"
)

// VLANGrant is one entry of vlanGrants: the VLANs a set of namespaces may
// ask for with podwire.io/vlan or podwire.io/vlan-trunk, and the addresses
// their pods may claim with podwire.io/vlan-ips.
//
//	{"vlans": "100-109", "namespaces": ["team-a"],
//	 "subnets": ["192.0.2.0/24", "2001:db8:100::/64"], "exclude": ["192.0.2.1/32"]}
//
// A VLAN may appear in several grants (a segment shared by two teams): a
// pod is admitted by any grant that covers the VLAN and names its
// namespace, and its addresses must lie inside the subnets of such a grant.
type VLANGrant struct {
	// VLANs are the granted IDs and ranges ("100-109,200"), required.
	VLANs string `json:"vlans"`
	// Namespaces are path.Match globs of the Kubernetes namespaces granted
	// the VLANs; empty grants no namespace (the VLANs then serve only as
	// the config's vlan/vlanTrunk). Write exact names where you can: a glob
	// also admits whoever may create a namespace that matches it.
	Namespaces []string `json:"namespaces,omitempty"`
	// NamespaceSelector grants the VLANs to the namespaces whose labels it
	// selects, besides those Namespaces names.
	NamespaceSelector *LabelSelector `json:"namespaceSelector,omitempty"`
	// Subnets are the prefixes podwire.io/vlan-ips may take addresses from,
	// on the access VLAN (PVID). Empty: no static address may be asked, and
	// the pod's port is pinned to its MAC only (addresses from DHCP or the
	// pod itself). With subnets, the port of an ordinary pod is pinned to
	// its MAC and exactly its vlan-ips (none: no IP source passes).
	Subnets []string `json:"subnets,omitempty"`
	// Exclude are prefixes inside Subnets that no pod may claim: the
	// gateway, routers, a VRRP virtual address.
	Exclude []string `json:"exclude,omitempty"`
	// VRRP are the VRRP virtual router IDs ("1-20", the syntax of VLANs)
	// whose virtual MAC and addresses the granted pods may hold with
	// podwire.io/vrrp (vrrp.go); empty grants none.
	VRRP string `json:"vrrp,omitempty"`

	// IDs, SubnetPrefixes, ExcludePrefixes and VRIDs are the fields parsed.
	IDs             vlan.Set       `json:"-"`
	VRIDs           vrrp.IDs       `json:"-"`
	SubnetPrefixes  []netip.Prefix `json:"-"`
	ExcludePrefixes []netip.Prefix `json:"-"`
}

// Grants reports whether g grants its VLAN id to namespace ns, by name or
// by labels.
func (g *VLANGrant) Grants(id uint16, ns Namespace) bool {
	return g.IDs.Contains(id) && NamespaceAdmitted(g.Namespaces, g.NamespaceSelector, ns)
}

// Permits reports whether a (a vlan-ips address) lies inside g's subnets and
// outside its exclusions.
func (g *VLANGrant) Permits(a netip.Addr) bool {
	return containsAddr(g.SubnetPrefixes, a) && !containsAddr(g.ExcludePrefixes, a)
}

// MatchNamespace reports whether ns matches one of the globs (path.Match
// syntax). An empty list or an unknown namespace ("") matches nothing.
func MatchNamespace(globs []string, ns string) bool {
	if ns == "" {
		return false
	}
	for _, g := range globs {
		if ok, _ := path.Match(g, ns); ok {
			return true
		}
	}
	return false
}

// PrefixInside reports whether p lies inside one of bounds (same family,
// no shorter, its network inside).
func PrefixInside(bounds []netip.Prefix, p netip.Prefix) bool {
	for _, b := range bounds {
		if b.Addr().Is4() == p.Addr().Is4() && b.Bits() <= p.Bits() && b.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// validateNamespaces checks a list of namespace globs under key.
func validateNamespaces(key string, globs []string) error {
	for i, g := range globs {
		k := fmt.Sprintf("%s[%d]", key, i)
		if g == "" {
			return Invalid(k, g, "empty glob")
		}
		if _, err := path.Match(g, ""); err != nil {
			return Invalid(k, g, "bad glob syntax: %v", err)
		}
	}
	return nil
}

// parsePrefixes parses a list of canonical prefixes under key.
func parsePrefixes(key string, list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range list {
		p, err := ParsePrefix(s)
		if err != nil {
			return nil, Invalid(fmt.Sprintf("%s[%d]", key, i), s, "%v", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// validateVLANGrants parses vlanGrants into GrantedVLANSet. A VLAN both in
// allowedVLANs (every namespace) and in a grant is refused: the grant would
// not restrict it. allowedVLANs itself stays valid, with a deprecation
// warning: it grants its VLANs to every namespace and any vlan-ips, as it
// did before vlanGrants.
func (c *NetConf) validateVLANGrants() error {
	seen := map[uint16]bool{}
	for i := range c.VLANGrants {
		g := &c.VLANGrants[i]
		key := fmt.Sprintf("vlanGrants[%d]", i)
		ids, err := vlan.Parse(g.VLANs)
		if err != nil {
			return Invalid(key+".vlans", g.VLANs, "%v", err)
		}
		if len(ids) == 0 {
			return Invalid(key+".vlans", g.VLANs, "names no VLAN")
		}
		var both vlan.Set
		for _, id := range ids {
			if c.AllowedVLANSet.Contains(id) {
				both = append(both, id)
			}
		}
		if len(both) > 0 {
			return Invalid(key+".vlans", g.VLANs, "VLANs %s are also in allowedVLANs %q, which grants them to every namespace: keep them in one of the two", both, c.AllowedVLANs)
		}
		g.IDs = ids
		for _, id := range ids {
			seen[id] = true
		}
		if err := validateNamespaces(key+".namespaces", g.Namespaces); err != nil {
			return err
		}
		if err := c.validateSelector(key+".namespaceSelector", g.NamespaceSelector); err != nil {
			return err
		}
		if g.SubnetPrefixes, err = parsePrefixes(key+".subnets", g.Subnets); err != nil {
			return err
		}
		if g.ExcludePrefixes, err = parsePrefixes(key+".exclude", g.Exclude); err != nil {
			return err
		}
		for j, p := range g.ExcludePrefixes {
			if !PrefixInside(g.SubnetPrefixes, p) {
				return Invalid(fmt.Sprintf("%s.exclude[%d]", key, j), g.Exclude[j], "is not inside %s.subnets %q", key, g.Subnets)
			}
		}
		if err := g.validateVRRP(key); err != nil {
			return err
		}
	}
	for id := range seen {
		c.GrantedVLANSet = append(c.GrantedVLANSet, id)
	}
	slices.Sort(c.GrantedVLANSet)
	if len(c.AllowedVLANSet) > 0 {
		c.Warnings = append(c.Warnings, fmt.Sprintf(
			"allowedVLANs %q is deprecated: it grants VLANs %s to pods of every namespace, with any podwire.io/vlan-ips; name the namespaces and subnets in vlanGrants",
			c.AllowedVLANs, c.AllowedVLANSet))
	}
	return nil
}

// VLANAllowed reports whether the config's own vlan/vlanTrunk may use id:
// inside allowedVLANs or a grant.
func (c *NetConf) VLANAllowed(id uint16) bool {
	return c.AllowedVLANSet.Contains(id) || c.GrantedVLANSet.Contains(id)
}

// validateTenancyBounds parses forwarding.sourcePrefixes and
// egress.allowedCIDRs, and checks egress.ips against the latter.
func (c *NetConf) validateTenancyBounds() error {
	var err error
	if c.SourcePrefixBounds, err = parsePrefixes("forwarding.sourcePrefixes", c.Forwarding.SourcePrefixes); err != nil {
		return err
	}
	if c.Egress == nil {
		return nil
	}
	if c.EgressBounds, err = parsePrefixes("egress.allowedCIDRs", c.Egress.AllowedCIDRs); err != nil {
		return err
	}
	for i, s := range c.Egress.IPs {
		if a, err := ParseAddr(s); err == nil && !EgressInside(c.EgressBounds, a) {
			return Invalid(fmt.Sprintf("egress.ips[%d]", i), s, "is not inside egress.allowedCIDRs %q", c.Egress.AllowedCIDRs)
		}
	}
	if c.Egress.NodeAnnotation && len(c.EgressBounds) == 0 {
		c.Warnings = append(c.Warnings,
			"egress.nodeAnnotation without egress.allowedCIDRs: whoever may annotate this Node chooses its egress IP; bound it with egress.allowedCIDRs")
	}
	return nil
}

// EgressInside reports whether the egress IP a lies inside bounds
// (egress.allowedCIDRs); empty bounds hold every address.
func EgressInside(bounds []netip.Prefix, a netip.Addr) bool {
	return len(bounds) == 0 || containsAddr(bounds, a)
}
