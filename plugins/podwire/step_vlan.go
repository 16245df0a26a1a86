package main

import (
	"fmt"
	"net"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// vlanStep wires a pod that asks for a VLAN (annotation podwire.io/vlan or
// podwire.io/vlan-trunk, else the config's vlan/vlanTrunk) onto the node
// bridge: a veth pair whose host end is an access or trunk port, and the
// uplink trunk carrying every VLAN a pod uses. Its state is rec.VLAN.
type vlanStep struct{}

func (vlanStep) name() string { return "vlan" }

// plan decides the attachment and refuses, before anything changes, a name
// clash, a foreign bridge without VLAN filtering and an uplink with a global
// address.
func (vlanStep) plan(a *attachment) error {
	pvid, tagged := uint16(a.conf.VLAN), a.conf.TrunkVLANs
	ann := a.ann
	if ann == nil {
		ann = &podmeta.Annotations{}
	}
	if ann.WantsVLAN() {
		pvid, tagged = ann.VLAN, ann.VLANTrunk
	}
	if pvid == 0 && len(tagged) == 0 {
		return nil
	}
	tagged = slices.DeleteFunc(slices.Clone(tagged), func(v uint16) bool { return v == pvid })
	ifName := a.conf.PodIfName
	key := "podIfName"
	if ann.VLANIfName != "" {
		ifName, key = ann.VLANIfName, podmeta.AnnotationVLANIfName
	}
	if ifName == a.args.IfName {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
			"%s %q clashes with the pod's primary interface %q", key, ifName, a.args.IfName), "")
	}
	v := &state.VLANAttachment{
		Bridge:    a.conf.Bridge,
		HostVeth:  vlanbridge.HostVethName(a.args.ContainerID, a.args.IfName),
		PodIfName: ifName,
		MAC:       vlanbridge.PodMAC(a.args.ContainerID, a.args.IfName).String(),
		PVID:      pvid,
		Tagged:    tagged,
		Uplink:    a.conf.Uplink,
		MTU:       a.conf.MTU,
		IPs:       ann.VLANIPs,
	}
	// Ordinary pods with static addresses get the bridge port check
	// (source MAC and IPs pinned; MAC only on a trunk port, whose tagged
	// VLANs carry addresses the pod sets itself); forwarding pods send any
	// source.
	v.PortCheck = len(v.IPs) > 0 && !ann.Forwarding && a.conf.SourceCheckEnabled()

	if err := vlanbridge.CheckNames(port(v, a.args.Netns)); err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "VLAN interface name clash", err.Error())
	}
	if l, err := netlinksafe.LinkByName(v.Bridge); err == nil {
		br, ok := l.(*netlink.Bridge)
		if !ok {
			return types.NewError(types.ErrInvalidNetworkConfig,
				fmt.Sprintf("invalid bridge %q: link is a %s, not a bridge", v.Bridge, l.Type()), "")
		}
		if br.Alias != vlanbridge.Alias && (br.VlanFiltering == nil || !*br.VlanFiltering) {
			return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
				"invalid bridge %q: an existing bridge that is not podwire's and has no VLAN filtering", v.Bridge), "")
		}
	}
	if v.Uplink != "" {
		l, err := vlanbridge.CheckUplinkAddresses(v.Uplink)
		if err != nil {
			return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("invalid uplink %q", v.Uplink), err.Error())
		}
		if v.MTU == 0 {
			v.MTU = l.Attrs().MTU
		}
	}
	a.rec.VLAN = v
	return nil
}

// port is the vlanbridge description of the attachment v in netns.
func port(v *state.VLANAttachment, netns string) *vlanbridge.Port {
	mac, _ := net.ParseMAC(v.MAC)
	return &vlanbridge.Port{MAC: mac,
		Bridge: v.Bridge, HostVeth: v.HostVeth, Netns: netns, PodIfName: v.PodIfName,
		VLANs: vlanbridge.PortVLANs{PVID: v.PVID, Tagged: v.Tagged}, MTU: v.MTU, IPs: v.IPs,
	}
}

func (vlanStep) add(a *attachment) error {
	v := a.rec.VLAN
	if v == nil {
		return nil
	}
	br, err := ensureBridgeAndUplink(a, v)
	if err != nil {
		return err
	}
	c, err := vlanbridge.CreatePort(br, port(v, a.args.Netns))
	if err != nil {
		return err
	}
	a.res.Interfaces = append(a.res.Interfaces,
		&current.Interface{Name: v.HostVeth, Mac: c.HostMAC},
		&current.Interface{Name: v.PodIfName, Mac: c.PodMAC, Sandbox: a.args.Netns})
	podIdx := len(a.res.Interfaces) - 1
	for _, ip := range v.IPs {
		a.res.IPs = append(a.res.IPs, &current.IPConfig{
			Interface: current.Int(podIdx),
			Address:   net.IPNet{IP: ip.Addr().AsSlice(), Mask: net.CIDRMask(ip.Bits(), ip.Addr().BitLen())},
		})
	}
	a.log.Info("VLAN port wired", "hostVeth", v.HostVeth, "podIf", v.PodIfName, "pvid", v.PVID, "tagged", v.Tagged)
	return nil
}

// ensureBridgeAndUplink makes the bridge and the uplink trunk and adds the
// pod's VLANs to the uplink, under the node lock: these are shared by every
// pod, and DEL counts the uplink's VLAN users from the records under it.
func ensureBridgeAndUplink(a *attachment, v *state.VLANAttachment) (*netlink.Bridge, error) {
	unlock, err := a.nodeLock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	br, err := vlanbridge.EnsureBridge(v.Bridge)
	if err != nil {
		return nil, err
	}
	if v.Uplink != "" {
		if _, err := vlanbridge.EnsureUplink(br, v.Uplink); err != nil {
			return nil, err
		}
		if err := vlanbridge.AddUplinkVLANs(v.Uplink, v.VLANs()); err != nil {
			return nil, err
		}
	}
	return br, nil
}

// del removes the veth pair and the uplink VLANs no other record uses. It
// runs under the node lock (teardown holds it). A veth that is gone went with
// the pod's netns: success.
func (vlanStep) del(a *attachment) error {
	v := a.rec.VLAN
	if v == nil {
		return nil
	}
	var errs []error
	if err := vlanbridge.DeletePort(v.HostVeth); err != nil {
		errs = append(errs, err)
	}
	if v.Uplink != "" {
		if unused, err := unusedUplinkVLANs(a, v); err != nil {
			errs = append(errs, err)
		} else if err := vlanbridge.RemoveUplinkVLANs(v.Uplink, unused); err != nil {
			errs = append(errs, err)
		}
	}
	return joinErrors(errs)
}

// unusedUplinkVLANs are the VLANs of v that no other attachment's record
// puts on the same uplink.
func unusedUplinkVLANs(a *attachment, v *state.VLANAttachment) ([]uint16, error) {
	recs, err := a.store.List()
	if err != nil && len(recs) == 0 {
		return nil, fmt.Errorf("failed to read records to count VLAN users of uplink %q: %w", v.Uplink, err)
	}
	inUse := map[uint16]bool{}
	for _, r := range recs {
		if r.Key() == a.rec.Key() || r.VLAN == nil || r.VLAN.Uplink != v.Uplink {
			continue
		}
		for _, id := range r.VLAN.VLANs() {
			inUse[id] = true
		}
	}
	var out []uint16
	for _, id := range v.VLANs() {
		if !inUse[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// check verifies the bridge (VLAN filtering, nf_call_* off when ours), the
// port's VLANs and MTU, the pod interface with its addresses, and the uplink
// carrying the pod's VLANs.
func (vlanStep) check(a *attachment) error {
	v := a.rec.VLAN
	if v == nil {
		return nil
	}
	br, err := vlanbridge.CheckBridge(v.Bridge)
	if err != nil {
		return err
	}
	if err := vlanbridge.CheckPort(br, port(v, a.args.Netns)); err != nil {
		return err
	}
	if v.Uplink == "" {
		return nil
	}
	up, err := netlinksafe.LinkByName(v.Uplink)
	if err != nil {
		return fmt.Errorf("uplink %q: %w", v.Uplink, err)
	}
	if up.Attrs().MasterIndex != br.Index {
		return fmt.Errorf("uplink %q is not a port of bridge %q", v.Uplink, v.Bridge)
	}
	have, err := vlanbridge.ListPortVLANs(up.Attrs().Index)
	if err != nil {
		return err
	}
	for _, id := range v.VLANs() {
		if !slices.Contains(have.Tagged, id) {
			return fmt.Errorf("uplink %q does not carry VLAN %d tagged", v.Uplink, id)
		}
	}
	return nil
}
