package main

import "github.com/podwire/podwire/pkg/state"

// The node-wide tables: load-balancer probe SNAT and egress IPs
// (pkg/nodetables). The tables and the per-pod egress source elements are
// pkg/ruleset's, laid down and repaired by ensureTables and added and
// removed with the attachment's elements; the tables are node-wide and stay
// on DEL.

// planNodeTables marks the pod as an egress source and, with egress.nodeAnnotation,
// refuses (CNI error 11) until the node agent has written the node's
// annotation into stateDir: the tables are built from that file.
func planNodeTables(in *planInput, rec *state.Record) error {
	rec.Egress = in.conf.EgressEnabled()
	return in.env.tables.NodeEgressErr
}

// warnNodeTables logs what stops the tables from doing their job (an
// egress IP not on the node, a probe without an uplink); it never fails ADD
// for it.
func (x *invocation) warnNodeTables() {
	if x.conf.ProbeSNAT == nil && !x.conf.EgressEnabled() {
		return
	}
	for _, w := range x.node.tableWarnings(x.env.tables) {
		x.log.Warn(w)
	}
}
