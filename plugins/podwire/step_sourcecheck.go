package main

import "github.com/podwire/podwire/pkg/state"

// sourceCheckStep verifies the source address of every ordinary pod's
// packets at the node (pkg/sourcecheck). Its per-pod state is set elements
// only (ruleset.Elements of the record), added, removed and checked by the
// verbs; forwarding pods have none (their interfaces are not checked). So it
// only plans. A pod whose primary leaves nothing to check at (no host
// interface, an Open vSwitch port) keeps rec.Unchecked: ADD warns and indexes
// it for STATUS (state.Store.MarkUnchecked).
type sourceCheckStep struct{}

func (sourceCheckStep) name() string { return "sourcecheck" }

func (sourceCheckStep) plan(in *planInput, rec *state.Record) error {
	rec.SourceCheck = in.conf.SourceCheckEnabled() && !in.ann.Forwarding && rec.Unchecked == ""
	if !in.conf.SourceCheckEnabled() || in.ann.Forwarding {
		// Nothing to check: the primary's shape does not matter.
		rec.Unchecked = ""
	}
	rec.AllowedSourcePrefixes = in.ann.AllowedSourcePrefixes
	return nil
}
