package main

import "github.com/podwire/podwire/pkg/state"

// planSourceCheck decides whether the pod's sources are checked at the
// node (pkg/sourcecheck): every ordinary pod's are. Its per-pod state is set
// elements only (ruleset.Elements of the record: inet podwire for a routed
// veth, bridge podwire for a bridge port), added, removed and checked by
// the verbs; forwarding pods have none (their interfaces are not checked). A pod whose primary leaves nothing to check at (no host
// interface, an Open vSwitch port) keeps rec.Unchecked: ADD warns and indexes
// it for STATUS (state.Store.MarkUnchecked).
func planSourceCheck(in *planInput, rec *state.Record) {
	rec.SourceCheck = in.conf.SourceCheckEnabled() && !in.ann.Forwarding && rec.Unchecked == ""
	if !in.conf.SourceCheckEnabled() || in.ann.Forwarding {
		// Nothing to check: the primary's shape does not matter.
		rec.Unchecked = ""
	}
	rec.AllowedSourcePrefixes = in.ann.AllowedSourcePrefixes
}
