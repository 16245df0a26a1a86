// Package ruleset is podwire's whole desired nftables ruleset as a value,
// and the verify-and-repair that the plugin's verbs and the node agent share.
//
// Tables and Elements are pure: from the config, a snapshot of the node
// (nodetables.Env, read once per invocation by nodetables.ReadEnv) and the
// attachment records, they return the tables (source check, bridge port
// check, probe SNAT, egress) and the set elements; they do no I/O. Ensure
// (every ADD) and Repair (the node agent's full verify) apply them
// through pkg/nft, reading only podwire's own objects.
package ruleset

import (
	"fmt"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/transit"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// Tables are the tables conf wants on a node described by env, in a stable
// order: the source check of routed and of bridged pods (when sourceCheck
// is on), the bridge port check
// (when VLANs are allowed at all: allowedVLANs or vlanGrants), the transit
// table (forwarding.notrack), then the node tables.
func Tables(conf *config.NetConf, env nodetables.Env) []*nft.Table {
	var out []*nft.Table
	if conf.SourceCheckEnabled() {
		out = append(out, sourcecheck.Table(), sourcecheck.BridgeTable())
	}
	if len(conf.AllowedVLANSet) > 0 || len(conf.GrantedVLANSet) > 0 {
		out = append(out, vlanbridge.PortCheckTable(conf.Uplinks()))
	}
	if conf.Forwarding.Notrack {
		out = append(out, transit.Table())
	}
	return append(out, nodetables.Tables(conf, env)...)
}

// Known are every table podwire may own: a present one that the config no
// longer wants is deleted by Ensure.
func Known() []nft.ID {
	return append([]nft.ID{sourcecheck.ID, sourcecheck.BridgeID, vlanbridge.PortCheckID, transit.ID}, nodetables.IDs()...)
}

// Elements are the set elements of one attachment. The source check's
// follow the config, not rec.SourceCheck: turning the check on rebuilds the
// table with every ordinary pod's elements.
func Elements(conf *config.NetConf, rec *state.Record) nft.Elements {
	e := nft.Elements{}
	addElements(e, conf, rec)
	return e
}

func addElements(e nft.Elements, conf *config.NetConf, rec *state.Record) {
	comment := rec.PodRef()
	if v := rec.VLAN; v != nil {
		vlanbridge.AddPortElements(e, v, comment)
	}
	if conf.SourceCheckEnabled() && !rec.Forwarding {
		sourcecheck.AddElements(e, sourcecheck.Pod{
			HostIfName:      rec.HostIfName,
			Addresses:       rec.Addresses,
			AllowedPrefixes: rec.AllowedSourcePrefixes,
			Name:            comment,
			Bridged:         rec.HostBridge != "",
		})
	}
	if conf.Forwarding.Notrack && (rec.Forwarding || len(rec.Routes) > 0) {
		// What a forwarding pod sends from other sources, and what goes to
		// any pod's routes, is transit.
		p := transit.Pod{Bridged: rec.HostBridge != "", Name: comment}
		if rec.Forwarding {
			p.HostIfName, p.Addresses = rec.HostIfName, rec.Addresses
		}
		for _, r := range rec.Routes {
			p.Routes = append(p.Routes, r.Dst)
		}
		transit.AddElements(e, p)
	}
	nodetables.AddElements(e, conf, rec)
}

// AllElements are the set elements of every record, gathered into one
// Elements (a rebuild at 1000 pods: no map per pod and set to merge).
func AllElements(conf *config.NetConf, recs []*state.Record) nft.Elements {
	e := nft.Elements{}
	for _, r := range recs {
		addElements(e, conf, r)
	}
	return e
}

// Ensure is what every ADD does: verify the tables by content and rebuild
// what differs under the node lock, every record's elements re-added (the
// records are read under the lock; unreadable ones are skipped and
// reported through skipped, so that one bad file does not stop the node).
func Ensure(c nft.Conn, want []*nft.Table, store *state.Store, conf *config.NetConf,
	lock func() (func(), error), skipped func(error)) (nft.Report, error) {
	return nft.Ensure(c, want, Known(), lock, func() (nft.Elements, error) {
		recs, err := store.List()
		if err != nil && skipped != nil {
			skipped(err)
		}
		return AllElements(conf, recs), nil
	})
}

// Repair is the node agent's full verify: Ensure, then every
// record's elements checked (one dump per set) and the missing ones added
// back in one batch. It returns what it found and did; missing is the
// number of elements it re-added, by table.
func Repair(c nft.Conn, conf *config.NetConf, env nodetables.Env, store *state.Store) (rep nft.Report, missing map[nft.ID]int, err error) {
	want := Tables(conf, env)
	rep, err = Ensure(c, want, store, conf, store.Lock, nil)
	if err != nil {
		return rep, nil, err
	}
	unlock, err := store.Lock()
	if err != nil {
		return rep, nil, err
	}
	defer unlock()
	recs, _ := store.List()
	lost, err := nft.MissingElements(c, want, AllElements(conf, recs))
	if err != nil {
		return rep, nil, err
	}
	missing = map[nft.ID]int{}
	total := 0
	for id, sets := range lost {
		for _, els := range sets {
			missing[id] += len(els)
			total += len(els)
		}
	}
	if total > 0 {
		if err := nft.AddElements(c, want, lost); err != nil {
			return rep, nil, fmt.Errorf("failed to re-add %d missing elements: %w", total, err)
		}
	}
	return rep, missing, nil
}
