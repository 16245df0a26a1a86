package podmeta

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vrrp"
)

// Claim is what one attachment holds on the node that no other may take:
// its static addresses on the access VLAN of a bridge, the virtual
// addresses of its VRRP groups there (shared only by the pods of the same
// group), and the prefixes the node routes to it. The plugin builds one per record (and one for the pod
// being added) and checks them with CheckClaims under the node lock, so two
// concurrent ADDs cannot both take the same address or route.
type Claim struct {
	// Key is the attachment ("containerID/ifname"); Pod names it
	// ("namespace/name", and its node where the claim comes from another
	// node's); Namespace is the pod's, which owns its VRRP groups.
	Key, Pod, Namespace string
	// Bridge and PVID are the access VLAN the addresses are on (PVID 0:
	// none; untagged frames of such a port go nowhere).
	Bridge  string
	PVID    uint16
	VLANIPs []netip.Addr
	// VRRP are the virtual routers the pod may act as on that VLAN
	// (podwire.io/vrrp).
	VRRP []vrrp.Group
	// Routes are the node routes to the pod (podwire.io/routes).
	Routes []netip.Prefix
}

// CheckClaims refuses mine when one of its VLAN addresses is held on the
// same bridge and access VLAN by another attachment of held (as a static
// address or a VRRP virtual address), when one of its VRRP virtual
// addresses is another attachment's static address there or a virtual
// address of another VRID there (the pods of one group share its addresses;
// two virtual routers answering for one address, each with its own virtual
// MAC, would split its traffic: RFC 5798 section 7.3), when one of its VRRP
// groups (a VRID there) is held by a pod of another namespace (a VRID and
// its addresses belong to the namespace that claimed them first), or when one of its
// routes overlaps (equals, contains or lies inside) another attachment's
// route: a more specific route would take over part of that pod's return
// path. The refusal (CNI error 7) names both pods and the values. held may
// contain mine's own attachment (a repeated ADD): it is skipped.
func CheckClaims(mine Claim, held []Claim) error {
	for _, h := range held {
		if h.Key == mine.Key {
			continue
		}
		if mine.PVID != 0 && h.PVID == mine.PVID && h.Bridge == mine.Bridge {
			if err := checkAddresses(mine, h); err != nil {
				return err
			}
		}
		for _, r := range mine.Routes {
			for _, o := range h.Routes {
				if r.Overlaps(o) {
					return refusal(agentapi.RefusalRouteOverlap, AnnotationRoutes, r, "no overlapping routes",
						"pod %s's route %s overlaps route %s of pod %s", mine.Pod, r, o, h.Pod)
				}
			}
		}
	}
	return nil
}

// checkAddresses compares the addresses of mine and h, two claims on one
// bridge and access VLAN.
func checkAddresses(mine, h Claim) error {
	held := func(a netip.Addr) string {
		if slices.Contains(h.VLANIPs, a) {
			return "holds"
		}
		for _, g := range h.VRRP {
			if slices.Contains(g.VIPs, a) {
				return fmt.Sprintf("holds as a virtual address of VRID %d", g.VRID)
			}
		}
		return ""
	}
	for _, a := range mine.VLANIPs {
		if how := held(a); how != "" {
			return refusal(agentapi.RefusalAddressHeld, AnnotationVLANIPs, a, "one holder per VLAN address",
				"pod %s asks for %s on VLAN %d of bridge %s, which pod %s %s", mine.Pod, a, mine.PVID, mine.Bridge, h.Pod, how)
		}
	}
	for _, g := range mine.VRRP {
		if h.Namespace != mine.Namespace && slices.ContainsFunc(h.VRRP, func(o vrrp.Group) bool { return o.VRID == g.VRID }) {
			return refusal(agentapi.RefusalVRRPGroup, AnnotationVRRP, g.VRID, "one namespace per VRRP group",
				"pod %s asks for VRID %d on VLAN %d of bridge %s, which pod %s of namespace %s holds",
				mine.Pod, g.VRID, mine.PVID, mine.Bridge, h.Pod, h.Namespace)
		}
		for _, a := range g.VIPs {
			how := held(a)
			if how == "" || slices.ContainsFunc(h.VRRP, func(o vrrp.Group) bool { return o.VRID == g.VRID && slices.Contains(o.VIPs, a) }) {
				continue // free, or shared within the group
			}
			return refusal(agentapi.RefusalAddressHeld, AnnotationVRRP, a, "one holder per VLAN address",
				"pod %s asks for %s as a virtual address of VRID %d on VLAN %d of bridge %s, which pod %s %s",
				mine.Pod, a, g.VRID, mine.PVID, mine.Bridge, h.Pod, how)
		}
	}
	return nil
}

// String names the claim for logs.
func (c Claim) String() string {
	return fmt.Sprintf("%s (%s): VLAN %d on %s %v, VRRP %v, routes %v", c.Pod, c.Key, c.PVID, c.Bridge, c.VLANIPs, c.VRRP, c.Routes)
}

// ClaimOf is what the attachment of rec holds: its routes, and its static
// and VRRP virtual addresses on its access VLAN.
func ClaimOf(rec *state.Record) Claim {
	c := Claim{Key: rec.Key(), Pod: rec.PodRef(), Namespace: rec.PodNamespace}
	for _, r := range rec.Routes {
		c.Routes = append(c.Routes, r.Dst)
	}
	if v := rec.VLAN; v != nil {
		c.Bridge, c.PVID = v.Bridge, v.PVID
		for _, ip := range v.IPs {
			c.VLANIPs = append(c.VLANIPs, ip.Addr())
		}
		c.VRRP = v.VRRP
	}
	return c
}

// Empty reports whether c holds nothing.
func (c Claim) Empty() bool {
	return len(c.Routes) == 0 && (c.PVID == 0 || len(c.VLANIPs) == 0 && len(c.VRRP) == 0)
}

// Wire is c as the claims of an agentapi.OpClaim, in a stable order: its
// routes (canonical CIDRs), then its static and virtual addresses on its
// access VLAN (none without one: such addresses reach no segment).
func (c Claim) Wire() []agentapi.Claim {
	var out []agentapi.Claim
	for _, r := range c.Routes {
		out = append(out, agentapi.Claim{Kind: agentapi.ClaimRoute, Value: r.Masked().String()})
	}
	if c.PVID == 0 {
		return out
	}
	for _, a := range c.VLANIPs {
		out = append(out, agentapi.Claim{Kind: agentapi.ClaimAddress, Value: a.String(), VLAN: c.PVID})
	}
	for _, g := range c.VRRP {
		for _, a := range g.VIPs {
			out = append(out, agentapi.Claim{Kind: agentapi.ClaimVIP, Value: a.String(), VLAN: c.PVID, VRID: g.VRID})
		}
	}
	return out
}

// ClaimOfWire is the Claim of one attachment from its wire claims, for a
// check across nodes: key, pod and namespace name the attachment, and its
// addresses are on the VLAN the claims name with no bridge (a VLAN ID is
// one segment through the switches, whatever each node calls its bridge).
// Errors: a claim of an unknown kind, a value that does not parse, an
// address or VIP without a VLAN, or claims on two VLANs (an attachment has
// one access VLAN).
func ClaimOfWire(key, pod, namespace string, cs []agentapi.Claim) (Claim, error) {
	c := Claim{Key: key, Pod: pod, Namespace: namespace}
	for _, w := range cs {
		switch w.Kind {
		case agentapi.ClaimRoute:
			p, err := netip.ParsePrefix(w.Value)
			if err != nil {
				return c, fmt.Errorf("claim %s %q: %w", w.Kind, w.Value, err)
			}
			c.Routes = append(c.Routes, p.Masked())
			continue
		case agentapi.ClaimAddress, agentapi.ClaimVIP:
		default:
			return c, fmt.Errorf("claim of unknown kind %q", w.Kind)
		}
		a, err := netip.ParseAddr(w.Value)
		if err != nil {
			return c, fmt.Errorf("claim %s %q: %w", w.Kind, w.Value, err)
		}
		switch {
		case w.VLAN == 0 || w.VLAN > 4094:
			return c, fmt.Errorf("claim %s %q: VLAN %d is not a VLAN ID (1-4094)", w.Kind, w.Value, w.VLAN)
		case c.PVID != 0 && c.PVID != w.VLAN:
			return c, fmt.Errorf("claim %s %q on VLAN %d: the attachment's other claims are on VLAN %d", w.Kind, w.Value, w.VLAN, c.PVID)
		}
		c.PVID = w.VLAN
		if w.Kind == agentapi.ClaimAddress {
			c.VLANIPs = append(c.VLANIPs, a)
			continue
		}
		if w.VRID == 0 {
			return c, fmt.Errorf("claim %s %q: no VRID", w.Kind, w.Value)
		}
		i := slices.IndexFunc(c.VRRP, func(g vrrp.Group) bool { return g.VRID == w.VRID })
		if i < 0 {
			c.VRRP = append(c.VRRP, vrrp.Group{VRID: w.VRID})
			i = len(c.VRRP) - 1
		}
		c.VRRP[i].VIPs = append(c.VRRP[i].VIPs, a)
	}
	return c, nil
}
