// Package suite is a fixture of lint_test.go outside the product's code:
// the process shape does not bind it, the netlink rule does.
package suite

import (
	"runtime"

	"github.com/vishvananda/netlink"
)

func bench() {
	runtime.LockOSThread()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	_, _ = netlink.RouteList(nil, netlink.FAMILY_ALL) // want "netlink dump: call netlinksafe.X"
}
