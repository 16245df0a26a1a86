package vlanbridge

import (
	"errors"
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/state"
)

// Env is what planning a VLAN attachment reads from the node ([ReadEnv]).
type Env struct {
	// NamesErr is a clash of the host veth or pod interface name.
	NamesErr error
	// BridgeType is the type of the link named like the bridge, "" when
	// there is none; BridgeOurs and BridgeVLANFiltering describe it.
	BridgeType                      string
	BridgeOurs, BridgeVLANFiltering bool
	// Uplink is the uplink this node uses, the first candidate of the
	// config's list that is a link here ([FindUplink]); "" for none
	// configured or none found. UplinkMTU is its MTU in bytes; UplinkErr
	// says why no uplink can carry VLANs (no candidate is a link here, a
	// *MissingUplinkError, or the chosen one holds a global address).
	Uplink    string
	UplinkMTU int
	UplinkErr error
}

// Plan completes the attachment v against the node env (the uplink this
// node uses, and its MTU when v has none) and refuses, before anything
// changes, a name clash, a link of another type named like the bridge, a
// foreign bridge without VLAN filtering and an uplink that cannot carry
// VLANs: each a CNI error 7 (invalid network config) naming the bridge or
// the uplink, or every uplink candidate when none is on the node. A missing
// uplink is 7, not 11 (try again later): the config names no NIC of this
// node, which an admin fixes by adding its name to the list, and a runtime
// retries a failed sandbox anyway.
func Plan(v *state.VLANAttachment, env Env) error {
	if env.NamesErr != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "VLAN interface name clash", env.NamesErr.Error())
	}
	switch {
	case env.BridgeType == "":
	case env.BridgeType != "bridge":
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("invalid bridge %q: link is a %s, not a bridge", v.Bridge, env.BridgeType), "")
	case !env.BridgeOurs && !env.BridgeVLANFiltering:
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
			"invalid bridge %q: an existing bridge that is not podwire's and has no VLAN filtering", v.Bridge), "")
	}
	if missing := (*MissingUplinkError)(nil); errors.As(env.UplinkErr, &missing) {
		return types.NewError(types.ErrInvalidNetworkConfig, missing.Error(), "")
	}
	if env.UplinkErr != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("invalid uplink %q", env.Uplink), env.UplinkErr.Error())
	}
	v.Uplink = env.Uplink
	if v.Uplink != "" && v.MTU == 0 {
		v.MTU = env.UplinkMTU
	}
	return nil
}

// PortOf is the bridge port of the attachment v, its pod end in the netns
// at path netns ("" or gone for DEL).
func PortOf(v *state.VLANAttachment, netns string) *Port {
	mac, _ := net.ParseMAC(v.MAC)
	var vmacs []net.HardwareAddr
	for _, g := range v.VRRP {
		vmacs = append(vmacs, g.MACs()...)
	}
	return &Port{MAC: mac, VRRPMACs: vmacs,
		Bridge: v.Bridge, HostVeth: v.HostVeth, Netns: netns, PodIfName: v.PodIfName,
		VLANs: PortVLANs{PVID: v.PVID, Tagged: v.Tagged}, MTU: v.MTU, IPs: v.IPs,
	}
}

// UnusedUplinkVLANs are the VLANs of v (the attachment of the record keyed
// key, state.Record.Key) that no other record of recs puts on the same
// uplink: those DEL may remove from the uplink. recs must be every record
// of the node; a caller that could not read one must remove nothing, since
// that record may hold any of v's VLANs.
func UnusedUplinkVLANs(v *state.VLANAttachment, key string, recs []*state.Record) []uint16 {
	inUse := map[uint16]bool{}
	for _, r := range recs {
		if r.Key() == key || r.VLAN == nil || r.VLAN.Uplink != v.Uplink {
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
	return out
}
