// Fixture of lint_test.go: every line the check must refuse.
package fixture

import (
	"runtime"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func switches(n ns.NetNS, h netns.NsHandle) {
	_ = unix.Setns(int(n.Fd()), unix.CLONE_NEWNET)
	_ = n.Set()
	runtime.LockOSThread()
	_ = netns.Set(h)
	_ = unix.Unshare(unix.CLONE_NEWNET)
}

func procs() {
	runtime.GOMAXPROCS(4)
	runtime.SetDefaultGOMAXPROCS()
}

// The one P made an ADD 20 % cheaper in CPU.
// bench -phases direct: 0.4 ms here.
func figures() {}
