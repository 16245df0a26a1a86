package shape

import (
	"runtime"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// portUpTimeout bounds the wait for a bridge port. A comment may name
// runtime.LockOSThread() or unix.Setns: the rules read code.
const portUpTimeout = 200 * time.Millisecond

// inPod is the allowed shape: the switch inside ns.WithNetNSPath, a read
// of GOMAXPROCS.
func inPod(path string) error {
	_ = runtime.GOMAXPROCS(0)
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return nil })
}

// reads go through netlinksafe, or carry the marker of their exception.
func reads(done chan struct{}) error {
	if _, err := netlinksafe.LinkList(); err != nil {
		return err
	}
	if _, err := netlink.LinkByIndex(1); err != nil { // not a dump
		return err
	}
	if _, err := netlink.LinkList(); err != nil { // dump retried
		return err
	}
	return netlink.LinkSubscribeWithOptions(nil, done, netlink.LinkSubscribeOptions{}) // no dump
}
