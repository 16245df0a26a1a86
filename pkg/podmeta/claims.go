package podmeta

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/podwire/podwire/pkg/agentapi"
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
	// ("namespace/name").
	Key, Pod string
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
// MAC, would split its traffic: RFC 5798 section 7.3), or when one of its
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
