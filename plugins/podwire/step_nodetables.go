package main

import (
	"context"
	"time"

	"github.com/podwire/podwire/pkg/nodetables"
)

// nodeTablesStep owns the node-wide tables: load-balancer probe SNAT and
// egress IPs (pkg/nodetables). The tables are laid down and repaired by
// ensureTables like every owner's; per pod there are only the egress source
// elements, added and removed with every step's elements.
type nodeTablesStep struct{}

func (nodeTablesStep) name() string { return "nodetables" }

// plan marks the pod as an egress source and, with egress.nodeAnnotation,
// refreshes the cached node annotation (an API call only when the cache is
// older than nodetables.CacheTTL): the tables are built from the cache.
func (nodeTablesStep) plan(a *attachment) error {
	a.rec.Egress = a.conf.EgressEnabled()
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	fetched, warn, err := nodetables.RefreshNodeEgress(ctx, a.conf, func() (nodetables.NodeGetter, error) {
		return nodetables.NewNodeGetter(a.conf.Kubeconfig, apiTimeout)
	}, time.Now())
	if err != nil {
		return err
	}
	if warn != "" {
		a.log.Warn(warn)
	}
	if fetched {
		a.log.Info("node annotation " + nodetables.EgressAnnotation + " read from the API")
	}
	return nil
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

// del: the elements go with every step's elements in teardown; the tables
// are node-wide and stay.
func (nodeTablesStep) del(*attachment) error { return nil }

// check: CHECK verifies the tables and elements for every owner.
func (nodeTablesStep) check(*attachment) error { return nil }
