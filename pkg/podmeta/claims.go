package podmeta

import (
	"fmt"
	"net/netip"

	"github.com/podwire/podwire/pkg/agentapi"
)

// Claim is what one attachment holds on the node that no other may take:
// its static addresses on the access VLAN of a bridge, and the prefixes the
// node routes to it. The plugin builds one per record (and one for the pod
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
	// Routes are the node routes to the pod (podwire.io/routes).
	Routes []netip.Prefix
}

// CheckClaims refuses mine when one of its VLAN addresses is held on the
// same bridge and access VLAN by another attachment of held, or one of its
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
			for _, a := range mine.VLANIPs {
				for _, b := range h.VLANIPs {
					if a == b {
						return refusal(agentapi.RefusalAddressHeld, AnnotationVLANIPs, a, "one holder per VLAN address",
							"pod %s asks for %s on VLAN %d of bridge %s, which pod %s holds", mine.Pod, a, mine.PVID, mine.Bridge, h.Pod)
					}
				}
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

// String names the claim for logs.
func (c Claim) String() string {
	return fmt.Sprintf("%s (%s): VLAN %d on %s %v, routes %v", c.Pod, c.Key, c.PVID, c.Bridge, c.VLANIPs, c.Routes)
}
