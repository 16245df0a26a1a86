package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/internal/testns"
)

// Addresses of the simulated node's uplink: "eth0" holding the
// default routes (the probe SNAT uplink) and the egress IPs.
const (
	uplinkName = "eth0"
	egressV4   = "203.0.113.10"
	egressV6   = "2001:db8::10"
)

// node is a simulated Kubernetes node: a netns of its own with forwarding
// on, an uplink with default routes, and a directory for libcni's cache,
// host-local's leases and podwire's state and log.
type node struct {
	name     string
	ns       ns.NetNS
	dir      string // on disk, like /var/lib/cni
	stateDir string // on tmpfs, like /run/podwire
	cni      *libcni.CNIConfig
	pods     []*pod // pods kept (existing pods of the scaling runs)
}

// newNode makes a node netns named name.
func (b *bench) newNode(name string) (*node, error) {
	nodeNS, err := testns.Make()
	if err != nil {
		return nil, fmt.Errorf("failed to create node netns: %w", err)
	}
	n := &node{name: name, ns: nodeNS, dir: filepath.Join(b.workDir, name), stateDir: filepath.Join(b.stateRoot, name)}
	b.nodes = append(b.nodes, n)
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return nil, err
	}
	n.cni = libcni.NewCNIConfigWithCacheDir(b.binDirs, filepath.Join(n.dir, "cache"), nil)
	if err := cnitest.Sysctls(nodeNS, cnitest.RouterSysctls...); err != nil {
		return n, err
	}
	err = n.ns.Do(func(ns.NetNS) error {
		// A veth pair stands for the NIC (this kernel may lack the dummy
		// driver); its peer is up so that the uplink has a carrier.
		up := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: uplinkName}, PeerName: uplinkName + "-peer"}
		if err := netlink.LinkAdd(up); err != nil {
			return fmt.Errorf("uplink: %w", err)
		}
		peer, err := netlinksafe.LinkByName(uplinkName + "-peer")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			return err
		}
		for _, a := range []string{"192.0.2.1/24", "2001:db8:1::1/64", egressV4 + "/32", egressV6 + "/128"} {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				return err
			}
			if err := netlink.AddrAdd(up, addr); err != nil {
				return fmt.Errorf("uplink address %s: %w", a, err)
			}
		}
		if err := netlink.LinkSetUp(up); err != nil {
			return err
		}
		for _, gw := range []string{"192.0.2.254", "2001:db8:1::fe"} {
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: up.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
				return fmt.Errorf("default route via %s: %w", gw, err)
			}
		}
		return nil
	})
	return n, err
}

// close removes the node netns and every pod netns it kept; the kernel
// removes their links, routes and tables with them.
func (n *node) close() {
	for _, p := range n.pods {
		p.closeNS()
	}
	n.pods = nil
	testns.Release(n.ns)
	n.ns = nil
}

// pod is one pod sandbox attached through one arm's conflist.
type pod struct {
	ns     ns.NetNS
	list   *libcni.NetworkConfigList
	rt     *libcni.RuntimeConf
	result *current.Result
}

func (p *pod) closeNS() {
	testns.Release(p.ns)
	p.ns = nil
}

// newPod makes a pod netns with IPv6 DAD off (so ptp does not wait for the
// addresses to settle) and the runtime config a CRI runtime would send.
func newPod(a *arm, seq int) (*pod, error) {
	podNS, err := cnitest.NewPodNS()
	if err != nil {
		return nil, err
	}
	args := cnitest.PodArgs{Name: fmt.Sprintf("bench-%s-%d", a.key, seq), Annotations: a.annotations}
	if len(a.annotations) == 0 {
		args.Annotations = nil // null: a pod without annotations, as containerd sends it
	}
	if a.forwarding {
		args.Namespace = "nf-bench"
	}
	if a.portmap {
		args.Capabilities = map[string]any{"portMappings": []map[string]any{
			{"hostPort": 20000 + seq%40000, "containerPort": 80, "protocol": "tcp"},
		}}
	}
	return &pod{ns: podNS, list: a.list, rt: args.RuntimeConf(podNS.Path())}, nil
}

// cost is what one operation took: wall time, and the CPU time (user +
// system) of every plugin process it ran, from getrusage(RUSAGE_CHILDREN)
// before and after (plugins and their IPAM children are waited for, so
// their CPU time lands there; the bench itself runs one operation at a time).
type cost struct {
	wall, cpu time.Duration
}

func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timed runs f and returns its cost.
func timed(f func() error) (cost, error) {
	c0, t0 := childrenCPU(), time.Now()
	err := f()
	return cost{wall: time.Since(t0), cpu: childrenCPU() - c0}, err
}

// add runs ADD through the chain in the node netns and returns its cost.
func (n *node) add(p *pod) (cost, error) {
	var res types.Result
	var c cost
	err := n.ns.Do(func(ns.NetNS) error {
		var err error
		c, err = timed(func() error {
			var err error
			res, err = n.cni.AddNetworkList(context.Background(), p.list, p.rt)
			return err
		})
		return err
	})
	if err != nil {
		return c, fmt.Errorf("ADD %s on %s: %w", p.list.Name, n.name, err)
	}
	if p.result, err = current.NewResultFromResult(res); err != nil {
		return c, err
	}
	return c, nil
}

// del runs DEL through the chain (libcni sends the cached prevResult).
func (n *node) del(p *pod) (cost, error) {
	var c cost
	err := n.ns.Do(func(ns.NetNS) error {
		var err error
		c, err = timed(func() error { return n.cni.DelNetworkList(context.Background(), p.list, p.rt) })
		return err
	})
	if err != nil {
		return c, fmt.Errorf("DEL %s on %s: %w", p.list.Name, n.name, err)
	}
	return c, nil
}

// addDel makes a pod, times its ADD and DEL and removes its netns.
func (n *node) addDel(a *arm, seq int) (add, del cost, err error) {
	p, err := newPod(a, seq)
	if err != nil {
		return add, del, err
	}
	defer p.closeNS()
	if add, err = n.add(p); err != nil {
		_, _ = n.del(p)
		return add, del, err
	}
	del, err = n.del(p)
	return add, del, err
}

// keep makes a pod through arm a and keeps it (an existing pod).
func (n *node) keep(a *arm, seq int) (cost, *pod, error) {
	p, err := newPod(a, seq)
	if err != nil {
		return cost{}, nil, err
	}
	c, err := n.add(p)
	if err != nil {
		_, _ = n.del(p)
		p.closeNS()
		return c, nil, err
	}
	n.pods = append(n.pods, p)
	return c, p, nil
}

// syntheticPods makes one pod through arm a's chain and clones its record
// until the node's stateDir holds n records (bench -synthetic-existing):
// other container IDs, pod names, host veth names and addresses, and no
// veth, route or lease behind them. Only what podwire reads of the records
// (the first invocation's rebuild) is as on a node with n pods.
func (n *node) syntheticPods(a *arm, count int) error {
	if _, _, err := n.keep(a, 0); err != nil {
		return err
	}
	names, err := filepath.Glob(filepath.Join(n.stateDir, "*.json"))
	if err != nil || len(names) != 1 {
		return fmt.Errorf("want one record in %s after the first pod: %v %v", n.stateDir, names, err)
	}
	data, err := os.ReadFile(names[0])
	if err != nil {
		return err
	}
	for i := 1; i < count; i++ {
		if err := checkInterrupted(); err != nil {
			return err
		}
		var rec map[string]any
		if err := json.Unmarshal(data, &rec); err != nil {
			return err
		}
		cid := fmt.Sprintf("%064x", 0x5e000000+i)
		rec["containerID"] = cid
		rec["podName"] = fmt.Sprintf("synthetic-%d", i)
		rec["hostIfName"] = fmt.Sprintf("vethsyn%08x", i)
		rec["addresses"] = []string{fmt.Sprintf("10.250.%d.%d", i>>8, i&0xff), fmt.Sprintf("fd00:250::%x", i)}
		out, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(n.stateDir, cid+"_eth0.json"), out, 0o600); err != nil {
			return err
		}
	}
	return nil
}
