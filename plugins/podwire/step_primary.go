package main

import (
	"fmt"

	"github.com/podwire/podwire/pkg/state"
)

// primaryStep records what the primary plugin made: the host veth and the
// pod's addresses, which the other steps key their work on. The primary
// plugin owns the veth: nothing of ours to add or delete.
type primaryStep struct{}

func (primaryStep) name() string { return "primary" }

func (primaryStep) plan(in *planInput, rec *state.Record) error {
	if in.env.primaryErr != nil {
		return in.env.primaryErr
	}
	rec.HostIfName = in.env.primary.HostIfName
	rec.Addresses = in.env.primary.Addresses
	rec.HostBridge = in.env.primary.Bridge
	rec.Unchecked = in.env.primary.Unchecked
	return nil
}

func (primaryStep) check(x *invocation) error {
	if x.rec.HostIfName == "" {
		return nil
	}
	if err := x.links.linkExists(x.rec.HostIfName); err != nil {
		return fmt.Errorf("host interface %q of the pod: %w", x.rec.HostIfName, err)
	}
	return nil
}
