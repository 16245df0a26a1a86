package main

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/netlinksafe"

	"github.com/podwire/podwire/pkg/primary"
)

// primaryStep records what the primary plugin made: the host veth and the
// pod's addresses, which the other steps key their work on.
type primaryStep struct{}

func (primaryStep) name() string { return "primary" }

func (primaryStep) plan(a *attachment) error {
	p, err := primary.FromResult(a.res, a.args.IfName, a.args.Netns)
	if err != nil {
		return err
	}
	a.rec.HostIfName = p.HostIfName
	a.rec.Addresses = p.Addresses
	return nil
}

func (primaryStep) add(*attachment) error { return nil }

// del: the primary plugin owns the veth; nothing of ours to remove.
func (primaryStep) del(*attachment) error { return nil }

func (primaryStep) check(a *attachment) error {
	if a.rec.HostIfName == "" {
		return nil
	}
	if _, err := netlinksafe.LinkByName(a.rec.HostIfName); err != nil {
		return fmt.Errorf("host interface %q of the pod: %w", a.rec.HostIfName, err)
	}
	return nil
}
