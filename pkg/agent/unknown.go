package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podwire/podwire/pkg/cliapi"
)

// Values of Config.UnknownInterfaces.
const (
	// UnknownReport lists the node's pod interfaces without a record (a
	// pod wired while podwire was out of the runtime's chain), unknown for
	// unknownGrace, in the agent's status, `podwire status`, /metrics and a
	// Node Event.
	UnknownReport = "report"
	// UnknownDrop also checks their sources as a pod's once they have
	// been unknown for unknownGrace: a routed veth may send only from the
	// addresses the node routes to it, a bridge port from none.
	UnknownDrop = "drop"
)

// unknownGrace is how long an interface must have been seen without a
// record before it is reported and (drop) its sources are checked: an ADD
// under way has its host veth from the primary before podwire writes the
// record, which on a loaded node takes seconds.
const unknownGrace = 5 * time.Second

// ReasonUnknownInterfaces is the reason of the Node Event naming pod
// interfaces without a record.
const ReasonUnknownInterfaces = "PodwireUnknownInterfaces"

// unknownSeen is the drift loop's memory of unknown interfaces: when each
// was first seen.
type unknownSeen map[string]time.Time

// repairArgs are the arguments of `podwire repair` beyond the conflist:
// the unknown interfaces to list and, with UnknownDrop, those unknown for
// longer than unknownGrace, whose sources it checks.
func (a *Agent) repairArgs(now time.Time) []string {
	switch a.cfg.UnknownInterfaces {
	case UnknownReport:
		return []string{"--unknown"}
	case UnknownDrop:
		var old []string
		for name, t := range a.unknown {
			if now.Sub(t) >= unknownGrace {
				old = append(old, name)
			}
		}
		slices.Sort(old)
		return []string{"--unknown", "--drop-unknown", strings.Join(old, ",")}
	}
	return nil
}

// noteUnknown updates the memory and the status from a repair's list, and
// logs and records on the Node each interface found for the first time.
func (a *Agent) noteUnknown(ctx context.Context, found []cliapi.UnknownInterface, now time.Time) {
	if a.cfg.UnknownInterfaces == "" {
		return
	}
	seen := unknownSeen{}
	var fresh, lines []string
	for _, u := range found {
		t, ok := a.unknown[u.Name]
		if !ok {
			t = now
		}
		seen[u.Name] = t
		if now.Sub(t) < unknownGrace {
			continue // maybe an ADD under way
		}
		if !a.reported[u.Name] {
			fresh = append(fresh, describeUnknown(u))
		}
		lines = append(lines, describeUnknown(u))
	}
	a.unknown = seen
	a.reported = map[string]bool{}
	for _, u := range found {
		if now.Sub(seen[u.Name]) >= unknownGrace {
			a.reported[u.Name] = true
		}
	}
	a.m.unknown.Set(float64(len(lines)))
	a.mu.Lock()
	a.status.Unknown = lines
	a.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	msg := fmt.Sprintf("pod interfaces without a podwire record (wired while podwire was out of the runtime's chain; delete their pods to wire them anew): %s", strings.Join(fresh, "; "))
	if a.cfg.UnknownInterfaces == UnknownDrop {
		msg += "; their sources are checked (unknownInterfaces=drop)"
	}
	a.log.Warn(msg)
	a.ev.onNode(a.node.UID(), corev1.EventTypeNormal, ReasonUnknownInterfaces, msg)
}

// describeUnknown is one line of the status: the interface, where it is,
// and whether its sources are checked.
func describeUnknown(u cliapi.UnknownInterface) string {
	s := u.Name
	if u.Bridge != "" {
		s += " (port of " + u.Bridge + ")"
	} else {
		addrs := make([]string, len(u.Addresses))
		for i, a := range u.Addresses {
			addrs[i] = a.String()
		}
		s += " (routed " + strings.Join(addrs, ",") + ")"
	}
	if u.Dropped {
		s += " checked"
	}
	return s
}
