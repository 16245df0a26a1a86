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

// reconcileVLANs repairs the VLAN wiring alone (noderepair.VLANs, under the
// node lock), in the agent's process, after a change to one of its links:
// a look at each VLAN attachment's bridge port and uplink, which changes
// nothing when nothing drifted. A VLAN pod's own ADD or DEL changes those
// links (a port comes or goes, the uplink gains or loses a VLAN) and costs
// this look, not a repair of the whole node: the tables are not concerned.
//
// Triggers: a change to one of those links (notify.go), settled by
// vlanSettle; a record written or removed (recordsChanged): the links are
// those the last look named, so a new attachment's port is followed only
// once a look has seen its record; a failed look of the node tables'
// repair. No backstop of its own: the node tables' repair looks at the
// VLAN wiring too.
func (a *Agent) reconcileVLANs(ctx context.Context) error {
	res := &cliapi.RepairResult{}
	var err error
	if res.VLANRepaired, res.VLANLinks, err = noderepair.VLANs(state.New(a.cfg.StateDir)); err != nil {
		res.VLANErrors = []string{err.Error()}
	}
	return a.noteVLAN(ctx, res)
}

// watchesLink reports whether u concerns a link of the VLAN wiring the last
// repair named.
func (a *Agent) watchesLink(u netlink.LinkUpdate) bool {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	return u.Attrs() != nil && a.tables.vlanLinks[u.Attrs().Name]
}

// noteVLAN keeps the repair's VLAN links and records its VLAN repairs as a
// Node Event; its failures are the error returned.
func (a *Agent) noteVLAN(_ context.Context, res *cliapi.RepairResult) error {
	links := map[string]bool{}
	for _, l := range res.VLANLinks {
		links[l] = true
	}
	a.st.mu.Lock()
	a.tables.vlanLinks = links
	a.st.mu.Unlock()
	if len(res.VLANRepaired) > 0 {
		msg := "the VLAN wiring of pods had drifted and was repaired: " + strings.Join(res.VLANRepaired, "; ")
		a.log.Warn(msg)
		a.ev.onNode(a.api.node.UID(), corev1.EventTypeNormal, ReasonVLANRepaired, msg)
	}
	if len(res.VLANErrors) > 0 {
		return fmt.Errorf("%s", strings.Join(res.VLANErrors, "; "))
	}
	return nil
}
