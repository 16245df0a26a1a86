package shape

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
)

// A test may lock its thread; the netlink rule holds in tests too.
func TestShape(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if _, err := netlink.LinkList(); err != nil { // want "netlink dump: call netlinksafe.X"
		t.Fatal(err)
	}
}
