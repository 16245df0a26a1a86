package podmeta

import (
	"slices"
	"strings"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/vrrp"
)

// parseVRRP types podwire.io/vrrp ("7=192.0.2.100,2001:db8::100;8=...",
// vrrp.ParseGroups), which needs podwire.io/vlan: the virtual routers live
// on the pod's access VLAN (pvid), as its vlan-ips do. An empty value asks
// for none.
func parseVRRP(raw map[string]string, pvid uint16) ([]vrrp.Group, error) {
	v, ok := raw[AnnotationVRRP]
	if !ok || strings.TrimSpace(v) == "" {
		return nil, nil
	}
	gs, err := vrrp.ParseGroups(v, MaxListItems)
	if err != nil {
		return nil, annotationError(AnnotationVRRP, v, "%v", err)
	}
	if pvid == 0 {
		return nil, annotationError(AnnotationVRRP, v, "needs %s: virtual routers are on the access VLAN", AnnotationVLAN)
	}
	return gs, nil
}

// admitVRRP gates podwire.io/vrrp: each group needs one vlanGrants entry
// that grants the pod's access VLAN to its namespace, lists the group's
// VRID in its vrrp, and permits each virtual address (inside its subnets,
// outside its exclusions), the rule of vlan-ips. allowedVLANs grants no
// VRRP. The virtual addresses are shared by design (the routers of one
// group on this or other nodes), so they are no claim of CheckClaims.
func admitVRRP(conf *config.NetConf, id Identity, a *Annotations) error {
	for _, g := range a.VRRP {
		vridGranted := false
		admitted := false
		for i := range conf.VLANGrants {
			gr := &conf.VLANGrants[i]
			if !gr.Grants(a.VLAN, id.NS()) || !gr.VRIDs.Contains(g.VRID) {
				continue
			}
			vridGranted = true
			all := true
			for _, vip := range g.VIPs {
				all = all && gr.PermitsVRRP(g.VRID, vip)
			}
			if all {
				admitted = true
				break
			}
		}
		switch {
		case admitted:
		case !vridGranted:
			return refusal(agentapi.RefusalAllowedVLANs, AnnotationVRRP, g, "vlanGrants",
				"VRID %d is not granted to namespace %q on VLAN %d (granted VRIDs %s)", g.VRID, id.Namespace, a.VLAN, grantedVRIDs(conf, id.NS(), a.VLAN))
		default:
			return refusal(agentapi.RefusalVLANSubnets, AnnotationVRRP, g, "vlanGrants",
				"the virtual addresses of VRID %d are not all inside the subnets of one grant of VLAN %d to namespace %q that lists it (%s)",
				g.VRID, a.VLAN, id.Namespace, grantedSubnets(conf, id.NS(), a.VLAN))
		}
	}
	return nil
}

// grantedVRIDs are the VRIDs the grants of VLAN vid to ns allow, for a
// refusal ("none" when no grant lists one).
func grantedVRIDs(conf *config.NetConf, ns config.Namespace, vid uint16) string {
	var ids vrrp.IDs
	for i := range conf.VLANGrants {
		if g := &conf.VLANGrants[i]; g.Grants(vid, ns) {
			ids = append(ids, g.VRIDs...)
		}
	}
	if len(ids) == 0 {
		return "none"
	}
	slices.Sort(ids)
	return slices.Compact(ids).String()
}
