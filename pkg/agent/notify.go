package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/pkg/forwarding"
)

// kernelWatch is the agent's subscriptions to the kernel's notifications,
// which trigger the reconcilers that follow the node: links (a bridge
// port's VLANs, a pod's veth), nftables (another owner's change to a
// podwire table), addresses and routes (what the node tables follow).
type kernelWatch struct {
	// links and env: subscribed (cleared by the reading goroutine when
	// its socket failed).
	links, env atomic.Bool
	// nft is the nftables watch (the runner's goroutine only; nil: none).
	nft *tableWatch
	// started: the first pass is done; a later subscription follows a
	// loss, after which a change may have gone unseen.
	started bool
}

// reconcileNotify subscribes to what it is not subscribed to, in the
// runner's thread (the node's netns), and takes nftables' notifications:
// a generation of another owner that touched a podwire table triggers the
// node tables' repair after tableSettle. It runs first: nothing changed
// after the first repair (and after Ready) goes unseen.
//
// Triggers: nftables' notifications; a subscription's end (ENOBUFS, when
// notifications came faster than they were read), which also repairs,
// since a change may have been lost. A failed subscription is retried
// with the runner's backoff; meanwhile the backstops repair.
func (a *Agent) reconcileNotify(ctx context.Context) error {
	k := &a.tables.kernel
	var errs []error
	resubscribed := false
	if !k.links.Load() {
		if err := a.subscribeLinks(ctx); err != nil {
			errs = append(errs, err)
		} else {
			resubscribed = k.started
		}
	}
	if !k.env.Load() {
		if err := a.subscribeEnv(ctx); err != nil {
			errs = append(errs, err)
		} else {
			resubscribed = resubscribed || k.started
		}
	}
	changed := false
	if k.nft != nil {
		changes, lost, ended := k.nft.take()
		changed = lost || a.foreignChange(changes)
		if ended {
			k.nft = nil
		}
	}
	if k.nft == nil {
		w, err := a.watchTables(ctx)
		if err != nil {
			errs = append(errs, err)
		} else {
			k.nft = w
			resubscribed = resubscribed || k.started
			go func() {
				for range w.ready {
					a.run.trigger(recNotify, 0)
				}
				a.run.trigger(recNotify, 0)
			}()
		}
	}
	k.started = true
	switch {
	case resubscribed:
		a.repairDue(0)
		a.run.trigger(recVLAN, vlanSettle)
	case changed:
		a.repairDue(tableSettle)
	}
	return errors.Join(errs...)
}

// subscribeLinks opens the kernel's link notifications (RTNLGRP_LINK,
// which also carries a bridge port's VLAN changes, family AF_BRIDGE) in the
// calling thread's netns, the node's: a change to a link of the VLAN
// wiring triggers its repair, a veth that comes or goes the look for
// unknown interfaces.
func (a *Agent) subscribeLinks(ctx context.Context) error {
	ch := make(chan netlink.LinkUpdate, 64)
	err := netlink.LinkSubscribeWithOptions(ch, ctx.Done(), netlink.LinkSubscribeOptions{ // no dump
		ErrorCallback: func(err error) {
			if ctx.Err() == nil { // not the socket's close at the stop
				a.log.Warn("link notifications", "error", err)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("no link notifications (VLAN drift is repaired by the node tables' backstop only): %w", err)
	}
	a.tables.kernel.links.Store(true)
	go func() {
		for u := range ch {
			if a.watchesLink(u) {
				a.run.trigger(recVLAN, vlanSettle)
			}
			if u.Link != nil && u.Attrs() != nil && u.Type() == "veth" {
				a.run.trigger(recUnknown, unknownSettle)
			}
		}
		a.tables.kernel.links.Store(false)
		a.run.trigger(recNotify, 0)
	}()
	return nil
}

// subscribeEnv opens the kernel's address and route notifications in the
// calling thread's netns, the node's: what the tables should be depends on
// them (the egress IPs the node holds, the uplinks, the default route's
// interfaces: nodetables.ReadEnv).
func (a *Agent) subscribeEnv(ctx context.Context) error {
	sub, cancel := context.WithCancel(ctx)
	addrs := make(chan netlink.AddrUpdate, 64)
	routes := make(chan netlink.RouteUpdate, 64)
	onErr := func(err error) {
		if sub.Err() == nil {
			a.log.Warn("address or route notifications", "error", err)
		}
	}
	err := netlink.AddrSubscribeWithOptions(addrs, sub.Done(), netlink.AddrSubscribeOptions{ErrorCallback: onErr})
	if err == nil {
		err = netlink.RouteSubscribeWithOptions(routes, sub.Done(), netlink.RouteSubscribeOptions{ErrorCallback: onErr}) // no dump
	}
	if err != nil {
		cancel()
		return fmt.Errorf("no address or route notifications (a change of the node's egress IPs or uplinks is seen by the backstop only): %w", err)
	}
	a.tables.kernel.env.Store(true)
	// A route change may have gone unseen before this subscription.
	a.memo.routes.hops.fibChanged()
	go func() {
		defer cancel()
		for {
			select {
			case _, ok := <-addrs:
				if !ok {
					a.tables.kernel.env.Store(false)
					a.run.trigger(recNotify, 0)
					return
				}
			case u, ok := <-routes:
				if !ok {
					a.tables.kernel.env.Store(false)
					a.run.trigger(recNotify, 0)
					return
				}
				// The next hops toward other nodes follow the
				// node's routes, but not the agent's own.
				if u.Protocol != forwarding.ProtoRemote {
					a.memo.routes.hops.fibChanged()
				}
			}
			a.run.trigger(recEnv, envSettle)
		}
	}()
	return nil
}
