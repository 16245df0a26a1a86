package main

import (
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/pkg/neigh"
)

// portUpTimeout bounds the wait for a bridge port to forward before the
// announcement (the link watch work usually ran long before the neigh step).
const portUpTimeout = 200 * time.Millisecond

// neighStep has the kernel announce the pod's addresses once everything is
// wired (it is the last step), on the pod interfaces that share an L2
// segment with neighbours: the VLAN interface (a port of the node bridge)
// and a primary interface whose host veth has a master (flannel's cni0, the
// reference bridge plugin). Nothing is sent on a point-to-point primary
// (ptp, Calico, Cilium), where no neighbour holds an entry to correct (see
// package neigh). Best effort: a failure is logged and never fails ADD. It
// makes nothing that DEL must remove, so del and check have nothing to do.
type neighStep struct{}

func (neighStep) name() string { return "neigh" }

func (neighStep) plan(*attachment) error { return nil }

func (neighStep) add(a *attachment) error {
	type pair struct{ podIf, hostIf string }
	var cands []pair
	if a.rec.HostIfName != "" && len(a.rec.Addresses) > 0 {
		cands = append(cands, pair{a.args.IfName, a.rec.HostIfName})
	}
	if v := a.rec.VLAN; v != nil && len(v.IPs) > 0 {
		cands = append(cands, pair{v.PodIfName, v.HostVeth})
	}
	var due []string
	for _, c := range cands {
		host, err := netlink.LinkByName(c.hostIf)
		if err != nil {
			a.log.Warn("neighbour announcement skipped", "ifname", c.podIf, "hostIf", c.hostIf, "error", err)
			continue
		}
		if !neigh.SharedSegment(host) {
			continue // point-to-point: the host side has no entry to correct
		}
		if err := neigh.WaitOperUp(c.hostIf, portUpTimeout); err != nil {
			a.log.Warn("announcing before the bridge port forwards", "ifname", c.podIf, "error", err)
		}
		due = append(due, c.podIf)
	}
	if len(due) == 0 {
		return nil
	}
	err := ns.WithNetNSPath(a.args.Netns, func(ns.NetNS) error {
		for _, ifName := range due {
			if err := neigh.Announce(ifName); err != nil {
				a.log.Warn("neighbour announcement failed", "ifname", ifName, "error", err)
			}
		}
		return nil
	})
	if err != nil {
		a.log.Warn("neighbour announcements skipped", "netns", a.args.Netns, "error", err)
	}
	return nil
}

// del: announcements leave nothing behind.
func (neighStep) del(*attachment) error { return nil }

func (neighStep) check(*attachment) error { return nil }
