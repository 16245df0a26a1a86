package main

import (
	"github.com/podwire/podwire/pkg/nodetables"
)

// nodeTablesStep owns the node-wide tables: load-balancer probe SNAT and
// egress IPs (pkg/nodetables). The tables and the per-pod egress source
// elements are pkg/ruleset's, laid down and repaired by ensureTables and
// added and removed with the attachment's elements.
type nodeTablesStep struct{}

func (nodeTablesStep) name() string { return "nodetables" }

// plan marks the pod as an egress source and, with egress.nodeAnnotation,
// makes sure the node agent has written the node's annotation into stateDir
// (CNI error 11 until it has): the tables are built from that file.
func (nodeTablesStep) plan(a *attachment) error {
	a.rec.Egress = a.conf.EgressEnabled()
	return nodetables.CheckNodeEgress(a.conf)
}

// add logs what stops the tables from doing their job (an egress IP not on
// the node, a probe without an uplink); it never fails ADD for it.
func (nodeTablesStep) add(a *attachment) error {
	if a.conf.ProbeSNAT == nil && !a.conf.EgressEnabled() {
		return nil
	}
	for _, w := range nodetables.Warnings(a.conf) {
		a.log.Warn(w)
	}
	return nil
}

// del: the elements go with the attachment's elements in teardown; the
// tables are node-wide and stay.
func (nodeTablesStep) del(*attachment) error { return nil }

// check: CHECK verifies the tables and elements.
func (nodeTablesStep) check(*attachment) error { return nil }
