package agent

import (
	"context"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/ruleset"
)

// envSettle is how long the agent waits after a change to the node's
// addresses or routes before it looks whether the tables should change: a
// burst (an interface's addresses, a pod's routes) makes one look.
const envSettle = 200 * time.Millisecond

// subscribeEnv opens the kernel's address and route notifications in the
// calling thread's netns, the node's: what the tables should be depends on
// them (the egress IPs the node holds, the uplinks, the default route's
// interfaces: nodetables.ReadEnv). The channel is signalled on any update
// and closed when a subscription failed; nil when it cannot subscribe (the
// backstop still repairs).
func (a *Agent) subscribeEnv(ctx context.Context) <-chan struct{} {
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
		a.log.Warn("no address or route notifications: a change of the node's egress IPs or uplinks is seen by the backstop only", "error", err)
		return nil
	}
	out := make(chan struct{}, 1)
	go func() {
		defer cancel()
		defer close(out)
		for {
			select {
			case _, ok := <-addrs:
				if !ok {
					return
				}
			case _, ok := <-routes:
				if !ok {
					return
				}
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out
}

// envKey is what the node's tables should be now, as one string: each
// table's hash and the node tables' errors (egress IPs refused or not
// assigned), read as a repair reads them, without touching nftables. ok
// is false while podwire is in no chain or its entry cannot be read.
func (a *Agent) envKey() (key string, ok bool) {
	a.mu.Lock()
	conflist := a.status.Conflist
	a.mu.Unlock()
	if conflist == "" {
		return "", false
	}
	conf, err := readEntryConf(conflist)
	if err != nil {
		return "", false
	}
	env := nodetables.ReadEnv(conf)
	var b strings.Builder
	for _, t := range ruleset.Tables(conf, env) {
		b.WriteString(t.ID().String() + " " + t.Hash() + "\n")
	}
	for _, e := range nodetables.Errors(nodetables.EnvWarnings(env)) {
		b.WriteString(e + "\n")
	}
	return b.String(), true
}
