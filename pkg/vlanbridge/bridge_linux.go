package vlanbridge

import (
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// nfCallAttrs are the per-bridge br_netfilter switches podwire turns off
// (IFLA_BR_NF_CALL_IPTABLES, _IP6TABLES, _ARPTABLES): bridged pod traffic
// must not be passed through the IP hooks, where conntrack and kube-proxy's
// NAT would de-NAT or drop it. They are per bridge, so the node-wide
// net.bridge.bridge-nf-call-* sysctls other CNIs rely on stay as they are.
// br_netfilter ORs them with those sysctls (br_nf_pre_routing), so they
// suffice only where the sysctls are 0; the port check table's notrack
// rules (portcheck.go) keep the bridged frames from NAT where they are 1.
var nfCallAttrs = []uint16{nl.IFLA_BR_NF_CALL_IPTABLES, nl.IFLA_BR_NF_CALL_IP6TABLES, nl.IFLA_BR_NF_CALL_ARPTABLES}

// EnsureBridge returns the bridge name, creating it if absent: VLAN
// filtering on, no default PVID (a new port joins no VLAN until it is told),
// nf_call_* off, alias Alias, up. An existing bridge of ours is repaired
// (filtering and nf_call_* turned back on/off). An existing bridge that is not
// ours is used only if it filters VLANs already; otherwise, and when name is
// not a bridge, the error says why and nothing is changed.
func EnsureBridge(name string) (*netlink.Bridge, error) {
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return nil, fmt.Errorf("failed to look up bridge %q: %w", name, err)
		}
		on, pvid := true, uint16(0)
		br := &netlink.Bridge{LinkAttrs: netlink.NewLinkAttrs(), VlanFiltering: &on, VlanDefaultPVID: &pvid}
		br.Name = name
		if err := netlink.LinkAdd(br); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("failed to create bridge %q: %w", name, err)
		}
		if l, err = netlinksafe.LinkByName(name); err != nil {
			return nil, fmt.Errorf("failed to look up bridge %q: %w", name, err)
		}
		if err := netlink.LinkSetAlias(l, Alias); err != nil {
			return nil, fmt.Errorf("failed to set alias of bridge %q: %w", name, err)
		}
		l.Attrs().Alias = Alias
	}
	br, ok := l.(*netlink.Bridge)
	if !ok {
		return nil, fmt.Errorf("link %q is a %s, not a bridge", name, l.Type())
	}
	filtering := br.VlanFiltering != nil && *br.VlanFiltering
	if br.Alias != Alias {
		if !filtering {
			return nil, fmt.Errorf("bridge %q is not podwire's (alias %q) and has no VLAN filtering: "+
				"turn vlan_filtering on or configure another \"bridge\"", name, br.Alias)
		}
	} else {
		if !filtering {
			if err := netlink.BridgeSetVlanFiltering(br, true); err != nil {
				return nil, fmt.Errorf("failed to turn on VLAN filtering of bridge %q: %w", name, err)
			}
		}
		if err := setNfCall(br.Index, 0); err != nil {
			return nil, fmt.Errorf("failed to turn off nf_call_* of bridge %q: %w", name, err)
		}
	}
	if br.Flags&unix.IFF_UP == 0 {
		if err := netlink.LinkSetUp(br); err != nil {
			return nil, fmt.Errorf("failed to set bridge %q up: %w", name, err)
		}
	}
	return br, nil
}

// CheckBridge verifies that name is a bridge with VLAN filtering, up, and,
// when it is ours, with nf_call_* off.
func CheckBridge(name string) (*netlink.Bridge, error) {
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("bridge %q: %w", name, err)
	}
	br, ok := l.(*netlink.Bridge)
	if !ok {
		return nil, fmt.Errorf("link %q is a %s, not a bridge", name, l.Type())
	}
	if br.VlanFiltering == nil || !*br.VlanFiltering {
		return nil, fmt.Errorf("bridge %q has VLAN filtering off", name)
	}
	if br.Flags&unix.IFF_UP == 0 {
		return nil, fmt.Errorf("bridge %q is down", name)
	}
	if br.Alias == Alias {
		vals, err := nfCall(br.Index)
		if err != nil {
			return nil, fmt.Errorf("failed to read nf_call_* of bridge %q: %w", name, err)
		}
		for attr, v := range vals {
			if v != 0 {
				return nil, fmt.Errorf("bridge %q has nf_call attribute %d on", name, attr)
			}
		}
	}
	return br, nil
}

// setNfCall sets every nf_call_* attribute of bridge index to v.
func setNfCall(index int, v byte) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("bridge"))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	for _, a := range nfCallAttrs {
		data.AddRtAttr(int(a), []byte{v})
	}
	req.AddData(info)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// nfCall reads the nf_call_* attributes of bridge index; an attribute the
// kernel does not report (no CONFIG_BRIDGE_NETFILTER) is left out.
func nfCall(index int) (map[uint16]byte, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return nil, err
	}
	out := map[uint16]byte{}
	for _, m := range msgs {
		data, err := nestedAttrs(m[unix.SizeofIfInfomsg:], unix.IFLA_LINKINFO, nl.IFLA_INFO_DATA)
		if err != nil {
			return nil, err
		}
		for _, d := range data {
			if slices.Contains(nfCallAttrs, d.Attr.Type) && len(d.Value) > 0 {
				out[d.Attr.Type] = d.Value[0]
			}
		}
	}
	return out, nil
}

// nestedAttrs parses b as route attributes and descends, for each type of
// path in turn, into the attribute of that type; it returns the attributes
// at the end of path, none when one on the way is absent.
func nestedAttrs(b []byte, path ...uint16) ([]syscall.NetlinkRouteAttr, error) {
	attrs, err := nl.ParseRouteAttr(b)
	for _, typ := range path {
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(attrs, func(a syscall.NetlinkRouteAttr) bool { return a.Attr.Type == typ })
		if i < 0 {
			return nil, nil
		}
		attrs, err = nl.ParseRouteAttr(attrs[i].Value)
	}
	return attrs, err
}
