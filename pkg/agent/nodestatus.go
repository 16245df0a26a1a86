package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/nodestatus"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vlan"
)

// NodeStatusResource is the PodwireNodeStatus custom resource (the chart's
// CRD): one per node, named after it, owned by its Node, written by that
// node's agent only (the chart's policy podwire-agent-podwirenode), read by
// `kubectl podwire` (pkg/nodestatus is its shape).
var NodeStatusResource = schema.GroupVersionResource{Group: nodestatus.Group, Version: nodestatus.Version, Resource: nodestatus.Resource}

// The node status reconciler's pace. A report is written when what it
// says changes (readiness, the chain, a repair, a failing reconciler, the
// wired pods, a refusal), at most once per statusGap; a change of the drop
// counters alone waits for the backstop, statusEvery. Nothing reads these
// objects but operators, so a node with churning pods costs the apiserver
// one small write per statusGap, and a quiet node one per statusEvery.
const (
	statusGap    = 5 * time.Second
	statusEvery  = 5 * time.Minute
	statusSettle = time.Second
)

// findingStatus is the writer's finding while a write fails: in `podwire
// status` on the node, not in the report.
const findingStatus = "node status"

// nodeReport is the node status reconciler's memory and its writer's.
type nodeReport struct {
	// client writes the PodwireNodeStatus; nil: none is written.
	client dynamic.ResourceInterface
	// refusals are the node's last refusals, newest last, and sig is the
	// agent's state as statusChanged last saw it (both under
	// nodeState.mu: the socket's goroutines add refusals).
	refusals []nodestatus.Refusal
	sig      string
	// handed is the last report the pass handed to the writer (its
	// Updated zero), at handedAt (the runner's goroutine only).
	handed   *nodestatus.Status
	handedAt time.Time
	// The writer's: pending is the report to write (nil: none), kick
	// wakes it; exists says the object is known to exist with
	// resourceVersion rv (else the next write reads it first).
	mu      sync.Mutex
	pending *nodestatus.Status
	kick    chan struct{}
	exists  bool
	rv      string
}

// noteRefusal keeps one refusal of the plugin for the report.
func (a *Agent) noteRefusal(namespace, name, gate, msg string) {
	a.st.mu.Lock()
	r := append(a.report.refusals, nodestatus.Refusal{Namespace: namespace, Name: name, Gate: gate, Message: msg, At: time.Now().UTC().Truncate(time.Second)})
	if len(r) > nodestatus.MaxRefusals {
		r = slices.Clone(r[len(r)-nodestatus.MaxRefusals:])
	}
	a.report.refusals = r
	a.st.mu.Unlock()
	a.run.trigger(recStatus, statusSettle)
}

// statusChanged runs after every pass (readinessChanged): when what the
// agent knows in memory of the node's state changed, the report is due.
// The records and the counters are read by the pass itself.
func (a *Agent) statusChanged() {
	if a.report.client == nil {
		return
	}
	st := a.Status()
	a.st.mu.Lock()
	sig := fmt.Sprint(st.Ready, a.st.outOfChain, st.Conflist, st.Mode, st.Restores, st.Repairs, a.st.tablesVerified,
		st.EgressIPs, len(st.Unknown), st.Errors, len(a.report.refusals))
	changed := sig != a.report.sig
	a.report.sig = sig
	a.st.mu.Unlock()
	if changed {
		a.run.trigger(recStatus, statusSettle)
	}
}

// reconcileStatus hands this node's report to the writer (writeStatuses)
// when it differs from the last one handed (the drop counters alone: once
// per statusEvery). It reads the records and the drop counters on the
// runner's goroutine (the node's netns) and never waits for the API, so a
// slow apiserver holds no repair back. A superseded agent reports nothing:
// the node's new agent does.
//
// Triggers: a change of the agent's state (statusChanged), the records
// (recordsChanged), a refusal. Backstop: statusEvery.
func (a *Agent) reconcileStatus(context.Context) error {
	if a.superseded() {
		return nil
	}
	rep := a.nodeStatus(readDrops)
	if h := a.report.handed; h != nil && time.Since(a.report.handedAt) < statusEvery && sameReport(h, rep) {
		return nil
	}
	a.report.handed, a.report.handedAt = rep, time.Now()
	a.report.mu.Lock()
	a.report.pending = rep
	a.report.mu.Unlock()
	select {
	case a.report.kick <- struct{}{}:
	default:
	}
	return nil
}

// writeStatuses writes the reports reconcileStatus hands it until ctx
// ends; a failed write is tried again after 1 s, doubling up to a minute,
// unless a newer report comes first, and is a finding meanwhile.
func (a *Agent) writeStatuses(ctx context.Context) {
	whenKicked(ctx, a.report.kick, func(ctx context.Context) (time.Duration, error) {
		err := a.writeStatus(ctx)
		a.setFinding(findingStatus, err)
		return 0, err
	})
}

// writeStatus writes the pending report, if any, into the node's
// PodwireNodeStatus (created owned by the node's Node, else updated with
// the resourceVersion last read); on failure the report stays pending,
// unless a newer one came meanwhile.
func (a *Agent) writeStatus(ctx context.Context) error {
	a.report.mu.Lock()
	rep := a.report.pending
	a.report.pending = nil
	a.report.mu.Unlock()
	if rep == nil {
		return nil
	}
	err := a.putStatus(ctx, rep)
	if err != nil {
		a.report.mu.Lock()
		if a.report.pending == nil {
			a.report.pending = rep
		}
		a.report.mu.Unlock()
	}
	return err
}

func (a *Agent) putStatus(ctx context.Context, rep *nodestatus.Status) error {
	uid := a.api.node.UID()
	if uid == "" {
		return errors.New("the node's own Node not read yet")
	}
	out := *rep
	out.Updated = time.Now().UTC().Truncate(time.Second)
	var status map[string]any
	b, err := json.Marshal(out)
	if err == nil {
		err = json.Unmarshal(b, &status)
	}
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetAPIVersion(nodestatus.APIVersion)
	u.SetKind(nodestatus.Kind)
	u.SetName(a.cfg.Node)
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: a.cfg.Node, UID: types.UID(uid)}})
	if !a.report.exists {
		cur, err := a.report.client.Get(ctx, a.cfg.Node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("reading PodwireNodeStatus %s: %w", a.cfg.Node, err)
		default:
			a.report.exists, a.report.rv = true, cur.GetResourceVersion()
		}
	}
	var written *unstructured.Unstructured
	if !a.report.exists {
		written, err = a.report.client.Create(ctx, u, metav1.CreateOptions{})
	} else {
		u.SetResourceVersion(a.report.rv)
		written, err = a.report.client.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
			a.report.exists = false // read it again at the retry
		}
		return fmt.Errorf("writing PodwireNodeStatus %s: %w", a.cfg.Node, err)
	}
	a.report.exists, a.report.rv = true, written.GetResourceVersion()
	return nil
}

// sameReport: a and b say the same but for the drop counters.
func sameReport(a, b *nodestatus.Status) bool {
	strip := func(s *nodestatus.Status) []byte {
		c := *s
		c.Counts.DroppedPackets = 0
		c.Pods = slices.Clone(c.Pods)
		for i := range c.Pods {
			c.Pods[i].DroppedPackets = 0
		}
		b, _ := json.Marshal(c)
		return b
	}
	return string(strip(a)) == string(strip(b))
}

// readDrops reads the source check's drop counters in the calling
// thread's netns, on a one-shot connection: each request opens its socket
// in the netns of the thread that sends it.
func readDrops() (map[string]sourcecheck.Drops, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	return sourcecheck.ReadDrops(c)
}

// nodeStatus is the report of the node as of now: the agent's state and
// the records of stateDir with the drop counters r reads. What could not
// be read is named in Errors.
func (a *Agent) nodeStatus(r func() (map[string]sourcecheck.Drops, error)) *nodestatus.Status {
	st := a.Status()
	a.st.mu.Lock()
	notReady := a.readyLocked()
	rep := &nodestatus.Status{
		Agent: nodestatus.Agent{Version: st.Version, Protocol: agentapi.Proto, Started: st.Started, Ready: notReady == nil},
		Chain: nodestatus.Chain{InChain: a.st.outOfChain == "" && st.Conflist != "", Reason: a.st.outOfChain,
			Conflist: st.Conflist, Mode: st.Mode, Restores: st.Restores},
		Tables: nodestatus.Tables{Verified: a.st.tablesVerified, Repairs: st.Repairs, LastRepair: st.LastRepair,
			LastRepaired: a.st.lastRepaired},
		EgressIPs: st.EgressIPs,
		Refusals:  slices.Clone(a.report.refusals),
	}
	for k, v := range a.st.findings {
		if k != findingStatus { // a report that says it could not be written, written late
			rep.Errors = append(rep.Errors, k+": "+v)
		}
	}
	a.st.mu.Unlock()
	if notReady != nil {
		rep.Agent.NotReady = notReady.Error()
	}
	if !rep.Chain.InChain && rep.Chain.Reason == "" {
		rep.Chain.Reason = "not in the chain yet"
	}
	slices.Sort(rep.Errors)
	for _, r := range st.Reconcilers {
		if r.LastError != "" {
			rep.Failing = append(rep.Failing, nodestatus.Reconciler{Name: r.Name, LastError: r.LastError, ErrorSince: r.ErrorSince})
		}
	}
	rep.Counts.Unknown = len(st.Unknown)

	recs, err := state.New(a.cfg.StateDir).List()
	if err != nil {
		rep.Errors = append(rep.Errors, "records: "+err.Error())
	}
	drops, err := r()
	if err != nil {
		rep.Errors = append(rep.Errors, "drop counters: "+err.Error())
	}
	routes := map[string]bool{}
	for _, rec := range recs {
		if !rec.Complete {
			continue
		}
		p := podOf(rec)
		if d := cliapi.AttachmentDrops(rec, drops); d != nil {
			p.DroppedPackets = d.Packets
			rep.Counts.DroppedPackets += d.Packets
		}
		rep.Counts.Wired++
		if rec.SourceCheck {
			rep.Counts.Checked++
		}
		if rec.Forwarding {
			rep.Counts.Forwarding++
		}
		if rec.Unchecked != "" {
			rep.Counts.Unchecked++
		}
		for _, rt := range p.Routes {
			routes[rt] = true
		}
		if len(rep.Pods) < nodestatus.MaxPods {
			rep.Pods = append(rep.Pods, p)
		} else {
			rep.PodsTruncated = true
		}
	}
	slices.SortFunc(rep.Pods, func(x, y nodestatus.Pod) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Name, y.Name), strings.Compare(x.Interface, y.Interface))
	})
	for rt := range routes {
		rep.Routes = append(rep.Routes, rt)
	}
	slices.Sort(rep.Routes)
	return rep
}

// podOf is one record's line of the report.
func podOf(rec *state.Record) nodestatus.Pod {
	p := nodestatus.Pod{Namespace: rec.PodNamespace, Name: rec.PodName, Interface: rec.IfName,
		SourceCheck: rec.SourceCheck, Unchecked: rec.Unchecked, Forwarding: rec.Forwarding, Egress: rec.Egress}
	if p.Name == "" {
		p.Name = rec.Key() // a runtime that sent no pod name
	}
	for _, ip := range rec.Addresses {
		p.Addresses = append(p.Addresses, ip.String())
	}
	for _, rt := range rec.Routes {
		p.Routes = append(p.Routes, rt.Dst.String())
	}
	if v := rec.VLAN; v != nil {
		switch {
		case len(v.Tagged) > 0 && v.PVID != 0:
			p.VLAN = "trunk " + vlan.Set(v.Tagged).String() + ", native " + strconv.Itoa(int(v.PVID))
		case len(v.Tagged) > 0:
			p.VLAN = "trunk " + vlan.Set(v.Tagged).String()
		case v.PVID != 0:
			p.VLAN = strconv.Itoa(int(v.PVID))
		}
		for _, g := range v.VRRP {
			p.VRRP = append(p.VRRP, int(g.VRID))
		}
	}
	return p
}
