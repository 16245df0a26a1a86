package podmeta

import (
	"fmt"
	"net/netip"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/config"
)

// admitVLAN gates the VLANs and static addresses a pod asks for. A VLAN of
// allowedVLANs (deprecated) is every namespace's, with any address, as
// before vlanGrants; a VLAN of vlanGrants only the namespaces a grant names,
// with addresses inside that grant's subnets and outside its exclusions.
// podwire.io/vlan-ips are the addresses of the access VLAN (PVID): on a
// granted trunk without podwire.io/vlan they are refused.
func admitVLAN(conf *config.NetConf, id Identity, a *Annotations) error {
	if !a.WantsVLAN() {
		return nil
	}
	type ask struct {
		key string
		id  uint16
	}
	var asked []ask
	if a.VLAN != 0 {
		asked = append(asked, ask{AnnotationVLAN, a.VLAN})
	}
	for _, v := range a.VLANTrunk {
		asked = append(asked, ask{AnnotationVLANTrunk, v})
	}
	grantedTrunk := false
	for _, v := range asked {
		if conf.AllowedVLANSet.Contains(v.id) {
			continue
		}
		if VLANGrant(conf, id.NS(), v.id) == nil {
			return refusal(agentapi.RefusalAllowedVLANs, v.key, v.id, "vlanGrants", "VLAN %d is not granted to namespace %q (granted VLANs %s, allowedVLANs %q)",
				v.id, id.Namespace, conf.GrantedVLANSet, conf.AllowedVLANs)
		}
		grantedTrunk = grantedTrunk || v.key == AnnotationVLANTrunk
	}
	if len(a.VLANIPs) == 0 {
		return nil
	}
	if a.VLAN == 0 {
		if grantedTrunk {
			return refusal(agentapi.RefusalVLANSubnets, AnnotationVLANIPs, joinPrefixes(a.VLANIPs), "vlanGrants",
				"static addresses are on the access VLAN: set %s to a VLAN whose grant has subnets", AnnotationVLAN)
		}
		return nil
	}
	if conf.AllowedVLANSet.Contains(a.VLAN) {
		return nil
	}
	for _, ip := range a.VLANIPs {
		if !vlanAddrPermitted(conf, id.NS(), a.VLAN, ip.Addr()) {
			return refusal(agentapi.RefusalVLANSubnets, AnnotationVLANIPs, ip, "vlanGrants", "%s is not inside the subnets granted to namespace %q on VLAN %d (%s)",
				ip.Addr(), id.Namespace, a.VLAN, grantedSubnets(conf, id.NS(), a.VLAN))
		}
	}
	return nil
}

// VLANGrant returns the first vlanGrants entry that grants VLAN vid to
// namespace ns, nil when none does.
func VLANGrant(conf *config.NetConf, ns config.Namespace, vid uint16) *config.VLANGrant {
	for i := range conf.VLANGrants {
		if conf.VLANGrants[i].Grants(vid, ns) {
			return &conf.VLANGrants[i]
		}
	}
	return nil
}

// PinsVLANAddresses reports whether the bridge port of a pod of namespace
// ns with access VLAN pvid is pinned to its static addresses even when it
// asked for none: a grant of pvid to ns lists subnets, so the only
// addresses the pod may send from are those it was given. Otherwise
// (allowedVLANs, a grant without subnets, no access VLAN) a port without
// static addresses is pinned to its MAC alone.
func PinsVLANAddresses(conf *config.NetConf, ns config.Namespace, pvid uint16) bool {
	if pvid == 0 {
		return false
	}
	for i := range conf.VLANGrants {
		if g := &conf.VLANGrants[i]; g.Grants(pvid, ns) && len(g.SubnetPrefixes) > 0 {
			return true
		}
	}
	return false
}

func vlanAddrPermitted(conf *config.NetConf, ns config.Namespace, vid uint16, a netip.Addr) bool {
	for i := range conf.VLANGrants {
		if g := &conf.VLANGrants[i]; g.Grants(vid, ns) && g.Permits(a) {
			return true
		}
	}
	return false
}

// grantedSubnets describes the subnets (and exclusions) granted to ns on
// vid, for a refusal.
func grantedSubnets(conf *config.NetConf, ns config.Namespace, vid uint16) string {
	var subnets, exclude []netip.Prefix
	for i := range conf.VLANGrants {
		if g := &conf.VLANGrants[i]; g.Grants(vid, ns) {
			subnets = append(subnets, g.SubnetPrefixes...)
			exclude = append(exclude, g.ExcludePrefixes...)
		}
	}
	if len(subnets) == 0 {
		return "no subnets: the grant allows no static address"
	}
	s := "subnets " + joinPrefixes(subnets)
	if len(exclude) > 0 {
		s += fmt.Sprintf(", excluding %s", joinPrefixes(exclude))
	}
	return s
}
