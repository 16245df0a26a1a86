// Package shape is a fixture of lint_test.go in the product's code (pkg/):
// each line marked want must be reported with that text, and no other.
package shape

import (
	"runtime"
	"syscall"

	"github.com/containernetworking/plugins/pkg/ns"
	nl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func switches(n ns.NetNS, h netns.NsHandle) {
	_ = unix.Setns(int(n.Fd()), unix.CLONE_NEWNET) // want "process shape: switch a thread's netns"
	_ = n.Set()                                    // want "process shape: switch a thread's netns"
	runtime.LockOSThread()                         // want "process shape: switch a thread's netns"
	defer runtime.UnlockOSThread()                 // want "process shape: switch a thread's netns"
	_ = netns.Set(h)                               // want "process shape: switch a thread's netns"
	_ = unix.Unshare(unix.CLONE_NEWNET)            // want "process shape: switch a thread's netns"
	_ = syscall.Unshare(syscall.CLONE_NEWNET)      // want "process shape: switch a thread's netns"
	set := n.Set                                   // want "process shape: switch a thread's netns"
	_ = set
}

func procs() {
	runtime.GOMAXPROCS(4)          // want "process shape: GOMAXPROCS is set only by"
	runtime.SetDefaultGOMAXPROCS() // want "process shape: GOMAXPROCS is set only by"
}

// dumps call netlink under another name: the rule sees the package.
func dumps() {
	_, _ = nl.LinkList()                   // want "netlink dump: call netlinksafe.X"
	_, _ = nl.RouteList(nil, nl.FAMILY_V4) // want "netlink dump: call netlinksafe.X"
	_, _ = nl.ConntrackDeleteFilters(0, 0) // want "netlink dump: call netlinksafe.X"
	_, _ = nl.LinkByName("eth0")           // want "netlink dump: call netlinksafe.X"
	_, _ = nl.NewHandleAt(netns.None())    // want "netlink dump: call netlinksafe.X"
	_, _ = nl.NeighList(1, nl.FAMILY_ALL)  // want "netlink dump: call netlinksafe.X"
	_, _ = nl.AddrList(nil, nl.FAMILY_ALL) // want "netlink dump: call netlinksafe.X"
	_, _ = nl.BridgeVlanList()             // want "netlink dump: call netlinksafe.X"
	_, _ = nl.RuleListFiltered(0, nil, 0)  // want "netlink dump: call netlinksafe.X"
}
