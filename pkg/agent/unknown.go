package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/noderepair"
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

// unknownSeen is the unknown interfaces' memory of unknown interfaces: when each
// was first seen.
type unknownSeen map[string]time.Time

// repairOptions are the repair's options beyond the tables: the unknown
// interfaces to list and, with UnknownDrop, those unknown for longer than
// unknownGrace, whose sources it checks.
func (a *Agent) repairOptions(now time.Time) noderepair.Options {
	switch a.cfg.UnknownInterfaces {
	case UnknownReport:
		return noderepair.Options{Unknown: true}
	case UnknownDrop:
		o := noderepair.Options{Unknown: true, Drop: map[string]bool{}}
		for name, t := range a.tables.unknown {
			if now.Sub(t) >= unknownGrace {
				o.Drop[name] = true
			}
		}
		return o
	}
	return noderepair.Options{}
}

// unknownSettle is how long after a veth appears or goes the agent looks
// for unknown interfaces: a burst of veths (a burst of ADDs) makes one look.
const unknownSettle = time.Second

// reconcileUnknown is the look for unknown interfaces (unknownDue): when
// one has passed its grace unreported, or one reported is gone, the node
// tables' repair lists them anew, reports them and (drop) checks their
// sources; otherwise the look comes back when the first one's grace ends.
//
// Triggers: a veth that came or went (notify.go), settled by
// unknownSettle; the end of an unknown interface's grace (noteUnknown).
// No backstop of its own: the node tables' backstop lists them too.
func (a *Agent) reconcileUnknown(context.Context) error {
	if a.unknownDue(time.Now()) {
		a.repairDue(0)
	} else if at, ok := a.unknownGraceEnds(); ok {
		a.run.triggerAt(recUnknown, at)
	}
	return nil
}

// unknownDue is the cheap look before a repair for unknown interfaces (one
// listing of the records, the links and the routes; nothing changed). It
// remembers when each interface without a record was first seen, and says
// whether a repair is due: one has passed its grace unreported, or one
// reported is gone. A fresh one is not: within its grace it may be an ADD
// under way (the primary makes the veth before podwire writes the record,
// seconds before on a node starting a burst of pods), and a repair would
// only list it.
func (a *Agent) unknownDue(now time.Time) bool {
	conflist := a.conflist()
	if conflist == "" {
		return false
	}
	conf, err := readEntryConf(conflist)
	if err != nil {
		return true // the repair reports it
	}
	found, err := noderepair.Unknown(conf, conflist)
	if err != nil {
		return true
	}
	seen := unknownSeen{}
	due := false
	for _, u := range found {
		t, ok := a.tables.unknown[u.Name]
		if !ok {
			t = now
		}
		seen[u.Name] = t
		if now.Sub(t) >= unknownGrace && !a.tables.reported[u.Name] {
			due = true // to be reported and (drop) checked
		}
	}
	for name := range a.tables.reported {
		if _, ok := seen[name]; !ok {
			due = true // gone: out of the status and the checks
		}
	}
	a.tables.unknown = seen
	return due
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
		t, ok := a.tables.unknown[u.Name]
		if !ok {
			t = now
		}
		seen[u.Name] = t
		if now.Sub(t) < unknownGrace {
			continue // maybe an ADD under way
		}
		if !a.tables.reported[u.Name] {
			fresh = append(fresh, describeUnknown(u))
		}
		lines = append(lines, describeUnknown(u))
	}
	a.tables.unknown = seen
	a.tables.reported = map[string]bool{}
	for _, u := range found {
		if now.Sub(seen[u.Name]) >= unknownGrace {
			a.tables.reported[u.Name] = true
		}
	}
	a.m.unknown.Set(float64(len(lines)))
	a.st.mu.Lock()
	a.st.status.Unknown = lines
	a.st.mu.Unlock()
	if at, ok := a.unknownGraceEnds(); ok {
		a.run.triggerAt(recUnknown, at)
	}
	if len(fresh) == 0 {
		return
	}
	msg := fmt.Sprintf("pod interfaces without a podwire record (wired while podwire was out of the runtime's chain; delete their pods to wire them anew): %s", strings.Join(fresh, "; "))
	if a.cfg.UnknownInterfaces == UnknownDrop {
		msg += "; their sources are checked (unknownInterfaces=drop)"
	}
	a.log.Warn(msg)
	a.ev.onNode(a.api.node.UID(), corev1.EventTypeNormal, ReasonUnknownInterfaces, msg)
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

// unknownGraceEnds is when the first unknown interface not yet reported
// passes its grace; ok false when there is none.
func (a *Agent) unknownGraceEnds() (at time.Time, ok bool) {
	for name, t := range a.tables.unknown {
		if a.tables.reported[name] {
			continue
		}
		if end := t.Add(unknownGrace); !ok || end.Before(at) {
			at, ok = end, true
		}
	}
	return at, ok
}
