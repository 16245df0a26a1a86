package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/internal/testns"
)

// inNetNS runs fn on a thread in the network namespace at path.
func inNetNS(path string, fn func() error) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return fn() })
}

// makeNetwork creates the node and outside namespaces and the link between
// them: eth0 in each, NodeIP/24 and OutsideIP/24, the node's default route
// via the outside, and the outside's routes to the pods (and
// Options.OutsideRoutes) via the node. rp_filter is off in both, so that
// only podwire's source check decides which forged packets pass; the node
// forwards.
func (c *Cluster) makeNetwork() error {
	node, err := testns.Make()
	if err != nil {
		return fmt.Errorf("failed to create the node netns: %w", err)
	}
	c.NodeNetNS = node.Path()
	node.Close()
	out, err := testns.Make()
	if err != nil {
		return fmt.Errorf("failed to create the outside netns: %w", err)
	}
	c.OutsideNetNS = out.Path()
	defer out.Close()

	if err := inNetNS(c.NodeNetNS, func() error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1500},
			PeerName: "eth0", PeerNamespace: netlink.NsFd(int(out.Fd()))}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("failed to add the node's veth: %w", err)
		}
		if err := linkUp("lo", "eth0"); err != nil {
			return err
		}
		if err := addAddr("eth0", NodeIP.String()+"/24"); err != nil {
			return err
		}
		eth0, _ := netlinksafe.LinkByName("eth0")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.IP(OutsideIP.AsSlice())}); err != nil {
			return fmt.Errorf("failed to add the node's default route: %w", err)
		}
		return setSysctls(map[string]string{
			"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0", "net/ipv4/conf/eth0/rp_filter": "0",
		})
	}); err != nil {
		return err
	}
	return inNetNS(c.OutsideNetNS, func() error {
		if err := linkUp("lo", "eth0"); err != nil {
			return err
		}
		if err := addAddr("eth0", OutsideIP.String()+"/24"); err != nil {
			return err
		}
		eth0, _ := netlinksafe.LinkByName("eth0")
		for _, p := range append([]netip.Prefix{PodCIDR}, c.opts.OutsideRoutes...) {
			_, dst, _ := net.ParseCIDR(p.String())
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: dst, Gw: net.IP(NodeIP.AsSlice())}); err != nil {
				return fmt.Errorf("failed to route %s to the node: %w", p, err)
			}
		}
		return setSysctls(map[string]string{"net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0", "net/ipv4/conf/eth0/rp_filter": "0"})
	})
}

func linkUp(names ...string) error {
	for _, n := range names {
		if err := cnitest.LinkUp(n); err != nil {
			return err
		}
	}
	return nil
}

func addAddr(link, cidr string) error {
	l, err := netlinksafe.LinkByName(link)
	if err != nil {
		return fmt.Errorf("failed to find %s: %w", link, err)
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(l, a); err != nil {
		return fmt.Errorf("failed to add %s to %s: %w", cidr, link, err)
	}
	return nil
}

func setSysctls(kv map[string]string) error {
	for k, v := range kv {
		if _, err := sysctl.Sysctl(k, v); err != nil {
			return fmt.Errorf("failed to set %s=%s: %w", k, v, err)
		}
	}
	return nil
}

// removeNetwork deletes both namespaces (the veth pair goes with them).
// A plain unmount can fail with EBUSY while the holder's mount namespace,
// which copied the bind mount, is being torn down: then it is detached
// lazily.
func (c *Cluster) removeNetwork() error {
	var errs []error
	for _, p := range []string{c.NodeNetNS, c.OutsideNetNS} {
		if p == "" {
			continue
		}
		err := unix.Unmount(p, 0)
		if err == unix.EBUSY {
			err = unix.Unmount(p, unix.MNT_DETACH)
		}
		if err != nil && err != unix.EINVAL && err != unix.ENOENT {
			errs = append(errs, fmt.Errorf("failed to unmount %s: %w", p, err))
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hostMountpoints are the node paths the holder binds a directory of the
// run over: they must exist on the host as mountpoints. /var/lib/kubelet is
// hard-coded in the kubelet (device plugins); /opt/cni/bin and
// /etc/cni/net.d are where deploy/'s DaemonSet mounts the CNI dirs from.
var hostMountpoints = []string{"/var/lib/kubelet", "/var/lib/cni", "/opt/cni/bin", "/etc/cni/net.d"}

// makeHostDirs creates the host mountpoints (and their missing parents)
// when absent; Stop removes those it made, deepest first.
func (c *Cluster) makeHostDirs() error {
	for _, d := range hostMountpoints {
		var missing []string
		for p := d; p != "/"; p = filepath.Dir(p) {
			if _, err := os.Stat(p); err == nil {
				break
			}
			missing = append(missing, p)
		}
		for i := len(missing) - 1; i >= 0; i-- {
			if err := os.Mkdir(missing[i], 0o755); err != nil {
				return err
			}
			c.hostDirs = append(c.hostDirs, missing[i])
		}
	}
	return nil
}

// makeCgroups creates the kubelet's cgroupRoot in every cgroup hierarchy
// (this host is hybrid v1: the kubelet's cgroupfs driver wants it in each
// controller's hierarchy), cpuset's with its parent's cpus and mems.
func (c *Cluster) makeCgroups() error {
	hier, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err == nil {
		hier = append(hier, "/sys/fs/cgroup/cgroup.procs") // pure v2
	}
	for _, h := range hier {
		parent := filepath.Dir(h)
		d := parent + c.cgroupRoot
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("failed to create cgroup %s: %w", d, err)
		}
		c.cgroupDirs = append(c.cgroupDirs, d)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(parent, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return fmt.Errorf("failed to copy %s to %s: %w", f, d, err)
				}
			}
		}
	}
	return nil
}

// CgroupTree lists the directories of the cgroup tree at root (root
// included) deepest first, the order rmdir(2) needs.
func CgroupTree(root string) []string {
	var dirs []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	return dirs
}

// removeCgroups removes the cgroupRoot trees, deepest first.
func (c *Cluster) removeCgroups() error {
	var errs []error
	for _, root := range c.cgroupDirs {
		for _, dir := range CgroupTree(root) {
			var err error
			for try := 0; try < 50; try++ { // a cgroup empties shortly after its last process dies
				if err = os.Remove(dir); err == nil || os.IsNotExist(err) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("failed to remove cgroup %s: %w", dir, err))
			}
		}
	}
	return errors.Join(errs...)
}

// holderScript runs in the node netns and a fresh mount namespace (slave
// propagation: nothing mounted here reaches the host). sysfs's net entries
// are those of the mounting namespace, so the node's are bound over
// /sys/class/net and /sys/devices/virtual/net (not over /sys, which would
// hide the cgroup mounts runc and the kubelet need; this is also why daemons
// enter with nsenter and not `ip netns exec`, which remounts /sys).
const holderScript = `set -e
d=$1
mount -t sysfs sysfs "$d/sys"
mount --bind "$d/sys/class/net" /sys/class/net
mount --bind "$d/sys/devices/virtual/net" /sys/devices/virtual/net
mount --bind "$d/run" /run
mount --bind "$d/varlog" /var/log
mount --bind "$d/kubelet" /var/lib/kubelet
mount --bind "$d/varlibcni" /var/lib/cni
mount --bind "$d/cni-bin" /opt/cni/bin
mount --bind "$d/net.d" /etc/cni/net.d
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1; do
	k=${kv%%=*}
	f="$d/sysctl/$(printf %s "$k" | tr / _)"
	printf '%s\n' "${kv#*=}" >"$f"
	mount --bind "$f" "/proc/sys/$k"
done
touch "$d/holder.ready"
exec sleep infinity`

// startHolder starts the process that holds the node's mount namespace.
func (c *Cluster) startHolder(ctx context.Context) error {
	log, err := os.Create(filepath.Join(c.Dir, "logs", "holder.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	c.holder = exec.Command("nsenter", "--net="+c.NodeNetNS, "--",
		"unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", holderScript, "holder", c.Dir)
	c.holder.Stdout, c.holder.Stderr = log, log
	c.holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.holder.Start(); err != nil {
		return fmt.Errorf("failed to start the namespace holder: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.wait(ctx, "the namespace holder", nil, 20*time.Millisecond, func() error {
		if _, err := os.Stat(filepath.Join(c.Dir, "holder.ready")); err != nil {
			if b, _ := os.ReadFile(filepath.Join(c.Dir, "logs", "holder.log")); len(b) > 0 {
				return fmt.Errorf("%s", b)
			}
			return err
		}
		return nil
	})
}

// ProcessesMentioning lists the pids whose command line contains s (a
// containerd socket path names the daemon and its shims).
func ProcessesMentioning(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone waits until pid has exited (and been reaped by its parent).
func waitGone(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			return
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(b), ") Z ") {
			return // a zombie: its parent (gone) left it to init
		}
		time.Sleep(50 * time.Millisecond)
	}
}
