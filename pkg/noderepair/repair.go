// Package noderepair is the repair of a whole node: podwire's nftables
// tables by content and every record's set elements (pkg/ruleset's
// Repair), the pod interfaces without a record (unknown.go) and the node's
// side of every VLAN attachment (vlan.go). `podwire repair` runs it for an
// operator; the node agent runs it in its own process when a change to
// podwire's objects or links is seen, and as a slow backstop.
//
// It works in the network namespace of the calling thread: every socket it
// opens (nftables, rtnetlink) is opened there. It takes the node lock for
// what it changes, so it orders with the plugin's ADD and DEL.
package noderepair

import (
	"fmt"

	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/ruleset"
	"github.com/podwire/podwire/pkg/state"
)

// Options are what a repair does beyond the tables, the elements and the
// VLAN wiring.
type Options struct {
	// Unknown also lists the node's pod interfaces without a record.
	Unknown bool
	// Drop names the unknown interfaces whose sources to check as a pod's
	// (implies Unknown).
	Drop map[string]bool
}

// Run repairs the node for conf, podwire's entry in conflist (whose
// primary's bridges and subnets say where unknown pod interfaces are). The
// result says what drifted and what was put back; an error means the
// tables are not known to be current. A failure of the VLAN wiring's
// repair is in the result's VLANErrors, not the error: the tables are
// current.
func Run(conf *config.NetConf, conflist string, opts Options) (*cliapi.RepairResult, error) {
	res := &cliapi.RepairResult{Conflist: conflist, Tables: []string{}}
	env := nodetables.ReadEnv(conf)
	want := ruleset.Tables(conf, env)
	for _, t := range want {
		res.Tables = append(res.Tables, t.ID().String())
	}
	c, err := nft.Dial()
	if err != nil {
		return nil, fmt.Errorf("nftables unusable: %w", err)
	}
	store := state.New(conf.StateDir)
	// The tables by content (rebuilt under the node lock when they
	// drifted, obsolete ones deleted), then every record's elements,
	// missing ones re-added.
	rep, missing, err := ruleset.Repair(c, conf, env, store)
	if err != nil {
		return nil, err
	}
	res.Drift = rep.Drift
	for _, id := range rep.Rebuilt {
		res.Rebuilt = append(res.Rebuilt, id.String())
	}
	for _, id := range rep.Deleted {
		res.Deleted = append(res.Deleted, id.String())
	}
	for id, n := range missing {
		if res.ElementsReadded == nil {
			res.ElementsReadded = map[string]int{}
		}
		res.ElementsReadded[id.String()] = n
		res.MissingElements += n
	}
	if opts.Unknown || len(opts.Drop) > 0 {
		if res.Unknown, err = unknownInterfaces(c, conf, env, conflist, store, want, opts.Drop); err != nil {
			return nil, fmt.Errorf("unknown interfaces: %w", err)
		}
	}
	res.Errors = nodetables.Errors(nodetables.EnvWarnings(env))
	if res.VLANRepaired, res.VLANLinks, err = VLANs(store); err != nil {
		res.VLANErrors = append(res.VLANErrors, err.Error())
	}
	res.Repaired = rep.Changed() || res.MissingElements > 0
	return res, nil
}
