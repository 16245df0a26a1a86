package main

import (
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
)

// sourceCheckStep verifies the source address of every ordinary pod's
// packets at the node (pkg/sourcecheck). Its per-pod state is set elements
// only, added and removed by the verbs from the record; forwarding pods
// have none (their interfaces are not checked).
type sourceCheckStep struct{}

func (sourceCheckStep) name() string { return "sourcecheck" }

func (sourceCheckStep) plan(a *attachment) error {
	a.rec.SourceCheck = a.conf.SourceCheckEnabled() && !a.ann.Forwarding
	a.rec.AllowedSourcePrefixes = a.ann.AllowedSourcePrefixes
	return nil
}

// add: the elements are added by ADD in one batch with every step's.
func (sourceCheckStep) add(*attachment) error { return nil }

// del: the elements are removed by teardown from the record.
func (sourceCheckStep) del(*attachment) error { return nil }

// check: CHECK verifies the table and the elements for every owner.
func (sourceCheckStep) check(*attachment) error { return nil }

func (sourceCheckStep) tables(conf *config.NetConf) []*nft.Table {
	if !conf.SourceCheckEnabled() {
		return nil
	}
	return []*nft.Table{sourcecheck.Table()}
}

// elements follow the config, not rec.SourceCheck: turning the check on
// rebuilds the table with every ordinary pod's elements.
func (sourceCheckStep) elements(conf *config.NetConf, rec *state.Record) nft.Elements {
	if !conf.SourceCheckEnabled() || rec.Forwarding {
		return nil
	}
	return sourcecheck.Elements(sourcecheck.Pod{
		HostIfName:      rec.HostIfName,
		Addresses:       rec.Addresses,
		AllowedPrefixes: rec.AllowedSourcePrefixes,
		Name:            rec.PodRef(),
	})
}
