package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/noderepair"
	"github.com/podwire/podwire/pkg/state"
)

// ReasonVLANRepaired is the reason of the Node Event recording that the
// VLAN wiring of pods (a bridge port's VLANs, the uplink on the bridge)
// had drifted and was put back.
const ReasonVLANRepaired = "PodwireVLANRepaired"

// vlanSettle is how long the agent waits after a change to a link of the
// VLAN wiring before it repairs: a burst of notifications (a port's VLANs
// removed one range at a time) makes one repair.
const vlanSettle = 100 * time.Millisecond

// subscribeLinks opens the kernel's link notifications (RTNLGRP_LINK,
// which also carries a bridge port's VLAN changes, family AF_BRIDGE) in the
// calling thread's netns, the node's. nil when it cannot: the backstop
// still repairs, within RepairInterval.
func (a *Agent) subscribeLinks(ctx context.Context) <-chan netlink.LinkUpdate {
	ch := make(chan netlink.LinkUpdate, 64)
	err := netlink.LinkSubscribeWithOptions(ch, ctx.Done(), netlink.LinkSubscribeOptions{ // no dump
		ErrorCallback: func(err error) {
			if ctx.Err() == nil { // not the socket's close at the stop
				a.log.Warn("link notifications", "error", err)
			}
		},
	})
	if err != nil {
		a.log.Warn("no link notifications: VLAN drift is repaired at the drift tick only", "error", err)
		return nil
	}
	return ch
}

// repairVLANs repairs the VLAN wiring alone (noderepair.VLANs, under the
// node lock), in the agent's process, after a change to one of its links:
// a look at each VLAN attachment's bridge port and uplink, which changes
// nothing when nothing drifted. A VLAN pod's own ADD or DEL changes those
// links (a port comes or goes, the uplink gains or loses a VLAN) and costs
// this look, not a repair of the whole node: the tables are not concerned.
func (a *Agent) repairVLANs(ctx context.Context) {
	res := &cliapi.RepairResult{}
	var err error
	if res.VLANRepaired, res.VLANLinks, err = noderepair.VLANs(state.New(a.cfg.StateDir)); err != nil {
		res.VLANErrors = []string{err.Error()}
	}
	a.noteVLAN(ctx, res)
}

// watchesLink reports whether u concerns a link of the VLAN wiring the last
// repair named.
func (a *Agent) watchesLink(u netlink.LinkUpdate) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.vlanLinks[u.Attrs().Name]
}

// noteVLAN keeps the repair's VLAN links, records its VLAN repairs as a
// Node Event and its failures as the agent's error "vlan repair".
func (a *Agent) noteVLAN(ctx context.Context, res *cliapi.RepairResult) {
	links := map[string]bool{}
	for _, l := range res.VLANLinks {
		links[l] = true
	}
	a.mu.Lock()
	a.vlanLinks = links
	a.mu.Unlock()
	if len(res.VLANErrors) > 0 {
		a.setErr("vlan repair", fmt.Errorf("%s", strings.Join(res.VLANErrors, "; ")))
	} else {
		a.setErr("vlan repair", nil)
	}
	if len(res.VLANRepaired) == 0 {
		return
	}
	msg := "the VLAN wiring of pods had drifted and was repaired: " + strings.Join(res.VLANRepaired, "; ")
	a.log.Warn(msg)
	a.ev.onNode(a.node.UID(), corev1.EventTypeNormal, ReasonVLANRepaired, msg)
}
