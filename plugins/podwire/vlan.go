package main

import (
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// A pod that asks for a VLAN (annotation podwire.io/vlan or
// podwire.io/vlan-trunk, else the config's vlan/vlanTrunk) onto the node
// bridge: a veth pair whose host end is an access or trunk port, and the
// uplink trunk carrying every VLAN a pod uses, is wired onto the node
// bridge. Its state is rec.VLAN.

// wantedVLAN is the VLAN attachment in asks for before the node is
// consulted (names, VLANs, the config's MTU), nil for none; readEnv reads
// the node for it and plan completes it (the uplink this node uses among
// the config's candidates, its MTU). The error is a name clash with the
// primary interface or with a Multus attachment: a *podmeta.Refusal
// (agentapi.RefusalBadAnnotation) when the pod's annotations cause it.
func wantedVLAN(in *planInput) (*state.VLANAttachment, error) {
	pvid, tagged := uint16(in.conf.VLAN), in.conf.TrunkVLANs
	ann := in.ann
	if ann.WantsVLAN() {
		pvid, tagged = ann.VLAN, ann.VLANTrunk
	}
	if pvid == 0 && len(tagged) == 0 {
		return nil, nil
	}
	tagged = slices.DeleteFunc(slices.Clone(tagged), func(v uint16) bool { return v == pvid })
	ifName := in.conf.PodIfName
	key := "podIfName"
	if ann.VLANIfName != "" {
		ifName, key = ann.VLANIfName, podmeta.AnnotationVLANIfName
	}
	if ifName == in.ifName {
		err := types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
			"%s %q clashes with the pod's primary interface %q", key, ifName, in.ifName), "")
		if key == podmeta.AnnotationVLANIfName {
			// The pod's annotation, not the node's config: a refusal the
			// pod's Events show.
			return nil, &podmeta.Refusal{Gate: agentapi.RefusalBadAnnotation, Err: err}
		}
		return nil, err
	}
	for _, m := range ann.Multus {
		if m.Interface == ifName {
			// The pod's own annotations disagree (its networks and its VLAN
			// interface's name): a refusal the pod's Events show.
			return nil, &podmeta.Refusal{Gate: agentapi.RefusalBadAnnotation, Err: types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
				"%s %q clashes with the interface Multus gives the pod's network %q (%s): set %s, or an interface for that network",
				key, ifName, m.Network, podmeta.AnnotationMultusNetworks, podmeta.AnnotationVLANIfName), "")}
		}
	}
	v := &state.VLANAttachment{
		Bridge:    in.conf.Bridge,
		HostVeth:  vlanbridge.HostVethName(in.containerID, in.ifName),
		PodIfName: ifName,
		MAC:       vlanbridge.PodMAC(in.containerID, in.ifName).String(),
		PVID:      pvid,
		Tagged:    tagged,
		MTU:       in.conf.MTU,
		IPs:       ann.VLANIPs,
		VRRP:      ann.VRRP,
	}
	planPortCheck(in, v)
	return v, nil
}

// planPortCheck pins the bridge port of every ordinary VLAN pod (sourceCheck
// on) to what it was given: its MAC, and its static addresses (vlan-ips) on
// an access port. A pod without static addresses is pinned to its MAC and no
// IP source where its namespace's grant of the VLAN lists subnets (every
// address it may use is one it would have asked for), else to its MAC alone
// (allowedVLANs, a grant without subnets: addresses from DHCP or the pod).
// A trunk port is pinned to its MAC alone: its tagged VLANs carry
// addresses the pod sets on its 802.1Q subinterfaces, unknown to podwire.
// Forwarding pods send any source and frames of other stations (an L2
// function), so their ports are not checked.
//
// The virtual routers an admin granted (v.VRRP, podwire.io/vrrp) are the
// one exception: their virtual MACs pass on any port, checked or not, and
// their virtual addresses on a checked port (vlanbridge.AddPortElements);
// every other pod port is kept off the VRRP MAC ranges.
func planPortCheck(in *planInput, v *state.VLANAttachment) {
	v.PortCheck = !in.ann.Forwarding && in.conf.SourceCheckEnabled()
	v.PortMACOnly = v.PortCheck && len(v.IPs) == 0 && !podmeta.PinsVLANAddresses(in.conf, in.pod.NS(), v.PVID)
}

// planVLAN decides the attachment and refuses, before anything changes, a name
// clash, a foreign bridge without VLAN filtering, a node where no uplink
// candidate is a link and an uplink with a global address. The record keeps
// the uplink chosen, so DEL, GC and CHECK use the one ADD used whatever the
// node holds by then.
func planVLAN(in *planInput, rec *state.Record) error {
	v, err := wantedVLAN(in)
	if err != nil || v == nil {
		return err
	}
	if err := vlanbridge.Plan(v, in.env.vlan); err != nil {
		return err
	}
	rec.VLAN = v
	return nil
}

// addVLAN makes the bridge and the uplink trunk and adds the pod's VLANs to the
// uplink under the node lock (these are shared by every pod, and DEL counts
// the uplink's VLAN users from the records under it), then the pod's port.
func (x *invocation) addVLAN() error {
	v := x.rec.VLAN
	if v == nil {
		return nil
	}
	unlock, err := x.lock.Lock()
	if err != nil {
		return err
	}
	br, err := x.vlan.ensureTrunk(v.Bridge, v.Uplink, v.VLANs())
	unlock()
	if err != nil {
		return err
	}
	c, err := x.vlan.createPort(br, vlanbridge.PortOf(v, x.args.Netns))
	if err != nil {
		return err
	}
	x.res.Interfaces = append(x.res.Interfaces,
		&current.Interface{Name: v.HostVeth, Mac: c.HostMAC},
		&current.Interface{Name: v.PodIfName, Mac: c.PodMAC, Sandbox: x.args.Netns})
	podIdx := len(x.res.Interfaces) - 1
	for _, ip := range v.IPs {
		x.res.IPs = append(x.res.IPs, &current.IPConfig{
			Interface: current.Int(podIdx),
			Address:   net.IPNet{IP: ip.Addr().AsSlice(), Mask: net.CIDRMask(ip.Bits(), ip.Addr().BitLen())},
		})
	}
	x.log.Info("VLAN port wired", "hostVeth", v.HostVeth, "podIf", v.PodIfName, "pvid", v.PVID, "tagged", v.Tagged)
	return nil
}

// delVLAN removes the veth pair and the uplink VLANs no other record uses. It
// runs under the node lock (teardown holds it). A veth that is gone went with
// the pod's netns: success.
func (x *invocation) delVLAN() error {
	v := x.rec.VLAN
	if v == nil {
		return nil
	}
	var errs []error
	if err := x.vlan.deletePort(v.HostVeth); err != nil {
		errs = append(errs, err)
	}
	if v.Uplink != "" {
		if recs, err := x.store.List(); err != nil {
			// A record that cannot be read may hold any of v's VLANs:
			// removing one it holds would cut that pod off the trunk,
			// while a VLAN left on the uplink only carries a tag nobody
			// sends. Keep them all.
			x.log.Warn("keeping the pod's VLANs on the uplink: a record could not be read", "uplink", v.Uplink, "vlans", v.VLANs(), "error", err)
		} else if unused := vlanbridge.UnusedUplinkVLANs(v, x.rec.Key(), recs); len(unused) > 0 {
			if err := x.vlan.removeUplinkVLANs(v.Uplink, unused); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// checkVLAN verifies the bridge (VLAN filtering, nf_call_* off when ours), the
// port's VLANs and MTU, the pod interface with its addresses, and the uplink
// carrying the pod's VLANs.
func (x *invocation) checkVLAN() error {
	v := x.rec.VLAN
	if v == nil {
		return nil
	}
	return x.vlan.checkVLAN(vlanbridge.PortOf(v, x.args.Netns), v.Uplink, v.VLANs())
}

// uplinkWarning is STATUS's warning about the uplink of conf, "" for none:
// no candidate is a link of the node, or the one this node uses cannot carry
// VLANs. Either fails only the ADD of a pod that needs a VLAN.
func (p *plugin) uplinkWarning(conf *config.NetConf) string {
	cands := conf.Uplinks()
	if len(cands) == 0 {
		return ""
	}
	// STATUS only warns: a candidate that cannot be looked up counts as absent.
	up, _ := vlanbridge.ChooseUplink("", cands, func(name string) (bool, error) { return p.node.linkExists(name) == nil, nil })
	if up == "" {
		return fmt.Sprintf("uplink %q missing: no candidate is a link of the node; the ADD of pods that need a VLAN fails until one is back; other pods are not affected", conf.Uplink)
	}
	if err := p.node.checkUplink(up); err != nil {
		return fmt.Sprintf("uplink unusable: %v: the ADD of pods that need a VLAN fails; other pods are not affected", err)
	}
	return ""
}
