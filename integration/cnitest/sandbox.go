package cnitest

import (
	"fmt"
	"net/netip"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/podwire/podwire/internal/testns"
)

// Sandbox is one pod sandbox: its netns and its attachment through a
// chain, as a CRI runtime makes them.
type Sandbox struct {
	NS     ns.NetNS
	RT     *libcni.RuntimeConf
	Result *current.Result
	// Version is the cniVersion of the result as the runtime received it.
	Version string
}

// NewPodNS makes a pod netns with lo up and IPv6 DAD off (so that ptp does
// not wait for addresses to settle). The caller releases it.
func NewPodNS() (ns.NetNS, error) {
	podNS, err := testns.Make()
	if err != nil {
		return nil, fmt.Errorf("pod: %w", err)
	}
	if err := Sysctls(podNS, NoDAD); err != nil {
		testns.Release(podNS)
		return nil, err
	}
	return podNS, nil
}

// AddSandbox makes a pod netns and runs ADD through list for the pod args.
// On a failed ADD it runs DEL (as a runtime does), releases the netns and
// returns the ADD's error. It never fails a test itself, so tests may run
// it in goroutines and report after Wait. The caller deletes and releases
// a sandbox it got.
func (c *Client) AddSandbox(list *libcni.NetworkConfigList, args PodArgs) (*Sandbox, error) {
	podNS, err := NewPodNS()
	if err != nil {
		return nil, err
	}
	s := &Sandbox{NS: podNS, RT: args.RuntimeConf(podNS.Path())}
	if s.Result, s.Version, err = c.Attach(list, s.RT); err != nil {
		testns.Release(podNS)
		return nil, err
	}
	return s, nil
}

// Addrs are the first IPv4 and IPv6 address of the result (zero when
// absent).
func (s *Sandbox) Addrs() (v4, v6 netip.Addr) {
	for _, ip := range s.Result.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		if a.Unmap().Is4() {
			if !v4.IsValid() {
				v4 = a.Unmap()
			}
		} else if !v6.IsValid() {
			v6 = a
		}
	}
	return v4, v6
}

// CheckLast runs CHECK of the last plugin of list alone: a list of the same
// name, so libcni sends the cached result as prevResult. ptp v1.9.1's CHECK
// looks for every IP of the result on its own interface, so it refuses a
// result that carries static VLAN IPs on net1: that is ptp's limit, not
// podwire's.
func (c *Client) CheckLast(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	only := *list
	only.Plugins = list.Plugins[len(list.Plugins)-1:]
	return c.Check(&only, rt)
}

// DelNoNetns runs DEL as a runtime's second DEL: no netns (and, after a
// first DEL, no cached prevResult).
func (c *Client) DelNoNetns(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	r := *rt
	r.NetNS = ""
	return c.Del(list, &r)
}
