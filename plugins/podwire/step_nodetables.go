package main

import "github.com/podwire/podwire/pkg/state"

// nodeTablesStep owns the node-wide tables: load-balancer probe SNAT and
// egress IPs (pkg/nodetables). The tables and the per-pod egress source
// elements are pkg/ruleset's, laid down and repaired by ensureTables and
// added and removed with the attachment's elements; the tables are
// node-wide and stay on DEL.
type nodeTablesStep struct{}

func (nodeTablesStep) name() string { return "nodetables" }

// plan marks the pod as an egress source and, with egress.nodeAnnotation,
// refuses (CNI error 11) until the node agent has written the node's
// annotation into stateDir: the tables are built from that file.
func (nodeTablesStep) plan(in *planInput, rec *state.Record) error {
	rec.Egress = in.conf.EgressEnabled()
	return in.env.tables.NodeEgressErr
}

// add logs what stops the tables from doing their job (an egress IP not on
// the node, a probe without an uplink); it never fails ADD for it.
func (nodeTablesStep) add(x *invocation) error {
	if x.conf.ProbeSNAT == nil && !x.conf.EgressEnabled() {
		return nil
	}
	for _, w := range x.links.tableWarnings(x.env.tables) {
		x.log.Warn(w)
	}
	return nil
}
