package main

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/netlinksafe"

	"github.com/podwire/podwire/pkg/forwarding"
)

// cmdStatus answers whether ADD can work (CNI 1.1 STATUS): nil when it can,
// error 50 (plugin not available) when it cannot: nftables unusable, or the
// configured uplink missing.
func cmdStatus(args *skel.CmdArgs) error {
	a, err := newAttachment(args, "STATUS")
	if err != nil {
		return err
	}
	for _, p := range statusProblems(a) {
		a.log.Error("STATUS: plugin not available", "problem", p)
		return types.NewError(types.ErrPluginNotAvailable, p, "")
	}
	// Not a reason to refuse ADD, but said loudly (DESIGN.md, rp_filter):
	// forwarding pods cannot forward IPv4 while all.rp_filter > 0.
	if len(a.conf.Forwarding.Namespaces) > 0 {
		if w := forwarding.RPFilterWarning(); w != "" {
			a.log.Warn(w)
		}
	}
	return nil
}

// statusProblems lists what stops ADD from working on this node.
func statusProblems(a *attachment) []string {
	var out []string
	if len(a.tables()) > 0 {
		c, err := a.conn()
		if err == nil {
			_, err = c.ListTables()
		}
		if err != nil {
			out = append(out, fmt.Sprintf("nftables unusable: %v", err))
		}
	}
	if a.conf.Uplink != "" {
		if _, err := netlinksafe.LinkByName(a.conf.Uplink); err != nil {
			out = append(out, fmt.Sprintf("uplink %q missing: %v", a.conf.Uplink, err))
		}
	}
	return out
}
