package main

import (
	"fmt"

	"github.com/podwire/podwire/pkg/state"
)

// The primary plugin's attachment: the host veth, the bridge it is a port
// of (if any) and the pod's addresses, which every other concern keys its
// work on. The primary plugin owns the veth: nothing of ours to add or
// delete.

// planPrimary records what the primary plugin made.
func planPrimary(in *planInput, rec *state.Record) error {
	if in.env.primaryErr != nil {
		return in.env.primaryErr
	}
	rec.HostIfName = in.env.primary.HostIfName
	rec.Addresses = in.env.primary.Addresses
	rec.HostBridge = in.env.primary.Bridge
	rec.Unchecked = in.env.primary.Unchecked
	return nil
}

// checkPrimary verifies the host veth is still there.
func (x *invocation) checkPrimary() error {
	if x.rec.HostIfName == "" {
		return nil
	}
	if err := x.node.linkExists(x.rec.HostIfName); err != nil {
		return fmt.Errorf("host interface %q of the pod: %w", x.rec.HostIfName, err)
	}
	return nil
}
