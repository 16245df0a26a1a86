package vm

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/podwire/podwire/internal/testns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// inVM reports whether the suite runs inside scripts/vm-test.sh, where every
// capability must be present: a test that would skip there fails instead.
func inVM() bool { return os.Getenv("PODWIRE_VM") == "1" }

// capability is a kernel feature a test needs, probed once in a throwaway
// namespace.
type capability struct {
	name   string
	config string
	probe  func() error
	once   sync.Once
	err    error
}

var (
	capVLANFiltering = &capability{
		name:   "bridge VLAN filtering",
		config: "CONFIG_BRIDGE_VLAN_FILTERING",
		probe: func() error {
			on := true
			br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "probe-br"}, VlanFiltering: &on}
			return netlink.LinkAdd(br)
		},
	}
	capVLAN8021Q = &capability{
		name:   "802.1Q VLAN interfaces",
		config: "CONFIG_VLAN_8021Q",
		probe: func() error {
			parent := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "probe-d"}}
			if err := netlink.LinkAdd(parent); err != nil {
				// No dummy driver: use a veth as the parent.
				parent := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "probe-d"}, PeerName: "probe-p"}
				if err := netlink.LinkAdd(parent); err != nil {
					return fmt.Errorf("failed to add a parent link: %w", err)
				}
			}
			p, err := netlinksafe.LinkByName("probe-d")
			if err != nil {
				return err
			}
			return netlink.LinkAdd(&netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: "probe-v", ParentIndex: p.Attrs().Index}, VlanId: 100})
		},
	}
)

func (c *capability) check() error {
	c.once.Do(func() {
		n, err := testns.Make()
		if err != nil {
			c.err = fmt.Errorf("failed to create a probe netns: %w", err)
			return
		}
		defer testns.Release(n)
		c.err = n.Do(func(ns.NetNS) error { return c.probe() })
	})
	return c.err
}

// require skips t (natively) or fails it (in the VM) unless the kernel has
// every capability in caps. The test must run as root.
func require(t testing.TB, caps ...*capability) {
	t.Helper()
	if os.Geteuid() != 0 {
		if inVM() {
			t.Fatal("the VM suite must run as root")
		}
		t.Skip("needs root to create network namespaces")
	}
	for _, c := range caps {
		err := c.check()
		if err == nil {
			continue
		}
		msg := fmt.Sprintf("kernel lacks %s (%s: %v); the VM suite runs this (make test-vm)", c.config, c.name, err)
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EINVAL) {
			msg = fmt.Sprintf("probing %s (%s) failed: %v", c.name, c.config, err)
		}
		if inVM() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}
