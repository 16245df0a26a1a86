package agent

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/install"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vlan"
)

// Revocation. The gates run at ADD only: a pod admitted then keeps what it
// was given (forwarding, routes, a VLAN) after its namespace is relabelled
// or the grant leaves the config. Tearing a running pod's network down
// would cut a router's traffic on an edit of the config; the agent reports
// it instead, so the operator decides: each record whose gates the current
// config and namespace labels no longer admit is named in the agent's
// status (`podwire status`), logged, and recorded as an Event on its pod.

// ReasonRevoked is the reason of the Event on a pod whose podwire
// attachment the current gates no longer admit.
const ReasonRevoked = "PodwireGateRevoked"

// revokedRecords is a line per record of recs whose attachment the gates
// of conf no longer admit (podmeta.Admit on what the record holds), by
// record key. labels is a namespace's labels from the cache (false when
// not cached: the namespace's records are not judged, as a deleted
// namespace's pods are going anyway).
func revokedRecords(conf *config.NetConf, recs []*state.Record, labels func(string) (map[string]string, bool)) map[string]string {
	out := map[string]string{}
	for _, r := range recs {
		if !r.Complete || r.PodNamespace == "" {
			continue
		}
		id := podmeta.Identity{Namespace: r.PodNamespace, Name: r.PodName, UID: r.PodUID}
		if conf.SelectsNamespaces() {
			l, ok := labels(r.PodNamespace)
			if !ok {
				continue
			}
			id.NamespaceLabels = l
		}
		if err := podmeta.Admit(conf, id, recordAnnotations(r)); err != nil {
			out[r.Key()] = fmt.Sprintf("%s (%s): %v", r.PodRef(), r.Key(), err)
		}
	}
	return out
}

// recordAnnotations is what a record was admitted with, as the gates read
// it.
func recordAnnotations(r *state.Record) *podmeta.Annotations {
	a := &podmeta.Annotations{Forwarding: r.Forwarding, AllowedSourcePrefixes: r.AllowedSourcePrefixes}
	for _, rt := range r.Routes {
		a.Routes = append(a.Routes, rt.Dst)
	}
	if v := r.VLAN; v != nil {
		a.VLAN, a.VLANTrunk, a.VLANIPs, a.VRRP = v.PVID, vlan.Set(v.Tagged), v.IPs, v.VRRP
	}
	return a
}

// revokedSync is reconcileGates' memory (the runner's goroutine only):
// what the last check read, and the records it reported.
type revokedSync struct {
	dirTime, confTime time.Time
	nsGen             uint64
	checkedAt         time.Time
	reported          map[string]string
}

// reconcileGates checks the node's records against the gates of the entry in
// conflist when the records, the conflist or a namespace changed (or
// every resyncEvery), and reports the records no longer admitted: status,
// log and an Event on the pod, once per record and reason.
//
// Triggers: a record written or removed, a namespace's labels changed, the
// chain's conflist written; resyncEvery as a backstop.
func (a *Agent) reconcileGates(context.Context) error {
	conflist := a.conflist()
	if conflist == "" || !a.api.ns.Synced() {
		return nil
	}
	dir, err1 := os.Stat(a.cfg.StateDir)
	cf, err2 := os.Stat(conflist)
	if err1 != nil || err2 != nil {
		return nil // the chain and the records report their own errors
	}
	rs := &a.memo.revoked
	gen := a.api.ns.gen.Load()
	if dir.ModTime().Equal(rs.dirTime) && cf.ModTime().Equal(rs.confTime) && gen == rs.nsGen && time.Since(rs.checkedAt) < resyncEvery {
		return nil
	}
	conf, err := readEntryConf(conflist)
	if err != nil {
		return err
	}
	recs, err := state.New(a.cfg.StateDir).List()
	if err != nil {
		return err
	}
	now := a.revokedRecordsNow(conf, recs)
	rs.dirTime, rs.confTime, rs.nsGen, rs.checkedAt = dir.ModTime(), cf.ModTime(), gen, time.Now()
	byKey := map[string]*state.Record{}
	for _, r := range recs {
		byKey[r.Key()] = r
	}
	for key, msg := range now {
		if rs.reported[key] == msg {
			continue
		}
		a.log.Warn("a running pod's podwire attachment is no longer admitted by the gates; it keeps running as wired", "record", msg)
		r := byKey[key]
		a.ev.onPod(r.PodNamespace, r.PodName, r.PodUID, corev1.EventTypeWarning, ReasonRevoked,
			"podwire's gates no longer admit this pod's attachment (it keeps what it was given until it is recreated): "+msg)
	}
	rs.reported = now
	lines := slices.Sorted(maps.Values(now))
	a.st.mu.Lock()
	a.st.status.Revoked = lines
	a.st.mu.Unlock()
	return nil
}

// revokedRecordsNow is revokedRecords with the namespace cache's labels.
func (a *Agent) revokedRecordsNow(conf *config.NetConf, recs []*state.Record) map[string]string {
	return revokedRecords(conf, recs, a.api.ns.cachedLabels)
}

// readEntryConf is podwire's entry in conflist, parsed.
func readEntryConf(conflist string) (*config.NetConf, error) {
	data, err := os.ReadFile(conflist)
	if err != nil {
		return nil, err
	}
	e, ok, err := install.Entry(data)
	if err != nil || !ok {
		return nil, fmt.Errorf("no podwire entry in %s: %v", conflist, err)
	}
	return install.ParseEntry(e)
}
