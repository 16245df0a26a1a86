package vlanbridge

import (
	"fmt"
	"slices"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
)

// ReadEnv reads what planning the port p with the uplink candidates
// uplinks (none for no uplink) depends on ([Plan]): name clashes, the link
// named like the bridge, the uplink this node uses ([FindUplink]), its MTU
// and whether it can carry VLANs.
func ReadEnv(p *Port, uplinks []string) Env {
	var env Env
	env.NamesErr = CheckNames(p)
	if l, err := netlinksafe.LinkByName(p.Bridge); err == nil {
		env.BridgeType = l.Type()
		if br, ok := l.(*netlink.Bridge); ok {
			env.BridgeOurs = br.Alias == Alias
			env.BridgeVLANFiltering = br.VlanFiltering != nil && *br.VlanFiltering
		}
	}
	if len(uplinks) == 0 {
		return env
	}
	if env.Uplink, env.UplinkErr = FindUplink(uplinks); env.UplinkErr != nil {
		return env
	}
	if l, err := CheckUplinkAddresses(env.Uplink); err != nil {
		env.UplinkErr = err
	} else {
		env.UplinkMTU = l.Attrs().MTU
	}
	return env
}

// EnsureTrunk makes the bridge and enslaves the uplink ("" for none)
// carrying vids tagged. The caller holds the node lock: the bridge, the
// uplink and its VLANs are shared by every pod.
func EnsureTrunk(bridge, uplink string, vids []uint16) (*netlink.Bridge, error) {
	br, err := EnsureBridge(bridge)
	if err != nil {
		return nil, err
	}
	if uplink != "" {
		if _, err := EnsureUplink(br, uplink); err != nil {
			return nil, err
		}
		if err := AddUplinkVLANs(uplink, vids); err != nil {
			return nil, err
		}
	}
	return br, nil
}

// CheckAttachment verifies the bridge (CheckBridge), the port p (CheckPort)
// and the uplink ("" for none): a port of the bridge carrying vids tagged.
func CheckAttachment(p *Port, uplink string, vids []uint16) error {
	return checkAttachment(p, uplink, vids, CheckPort)
}

// CheckAttachmentNode is CheckAttachment of the node's side only (the pod's
// end is the pod's): what a repair can put back.
func CheckAttachmentNode(p *Port, uplink string, vids []uint16) error {
	return checkAttachment(p, uplink, vids, CheckPortNode)
}

func checkAttachment(p *Port, uplink string, vids []uint16, checkPort func(*netlink.Bridge, *Port) error) error {
	br, err := CheckBridge(p.Bridge)
	if err != nil {
		return err
	}
	if err := checkPort(br, p); err != nil {
		return err
	}
	if uplink == "" {
		return nil
	}
	up, err := netlinksafe.LinkByName(uplink)
	if err != nil {
		return fmt.Errorf("uplink %q: %w", uplink, err)
	}
	if up.Attrs().MasterIndex != br.Index {
		return fmt.Errorf("uplink %q is not a port of bridge %q", uplink, p.Bridge)
	}
	have, err := ListPortVLANs(up.Attrs().Index)
	if err != nil {
		return err
	}
	for _, id := range vids {
		if !slices.Contains(have.Tagged, id) {
			return fmt.Errorf("uplink %q does not carry VLAN %d tagged", uplink, id)
		}
	}
	return nil
}
