package cluster

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/internal/testns"
	"github.com/podwire/podwire/tools/image/sbom"
)

// Node is one node of the cluster: a network namespace on the switch, a
// private mount namespace held by a sleeping process (the holder), its own
// containerd, kubelet and cgroup root. Its fields are read-only.
type Node struct {
	c *Cluster
	// Name is the Kubernetes name of the node (podwire-k8s-1, -2, ...).
	Name string
	// Index is the node's position in Cluster.Nodes.
	Index int
	// IP is the node's IPv4 address on its uplink (eth0, on the switch);
	// IP6 its IPv6 address there, when the cluster is dual-stack.
	IP, IP6 netip.Addr
	// NetNS is the path of the node's network namespace.
	NetNS string
	// Dir is the node's directory in the run: the directories the holder
	// binds over the node's /run, /var/log, CNI dirs and the rest, and
	// containerd's root, state and socket.
	Dir string
	// CNIBinDir and CNIConfDir are the node's /opt/cni/bin and
	// /etc/cni/net.d, seen from the host (containerd's bin_dir, conf_dir).
	CNIBinDir, CNIConfDir string
	// PrimaryConflist is the ptp conflist Start wrote (PrimaryPTP only).
	PrimaryConflist string
	// PodCIDR is the node's ptp + host-local range (PrimaryPTP only; with
	// PrimaryNone the controller-manager allocates the node's podCIDRs).
	PodCIDR netip.Prefix
	// ContainerdSock is the node's containerd gRPC socket.
	ContainerdSock string
	// CRISock is the socket of the node's CRI, which its kubelet talks
	// to: ContainerdSock, or CRI-O's.
	CRISock string
	// Kubeconfig is the kubelet's (system:node:Name, group system:nodes),
	// reaching the apiserver on the first node's uplink address.
	Kubeconfig string

	holder     *exec.Cmd
	criConn    *grpc.ClientConn
	cri        runtimeapi.RuntimeServiceClient
	cgroupRoot string   // the kubelet's cgroupRoot, e.g. /podwire-k8s-123-1
	cgroupDirs []string // cgroupRoot made in each hierarchy
}

// nodeDirs are the node's directories, made by newNode under Node.Dir.
var nodeDirs = []string{"cni-bin", "net.d", "run", "sys", "nohugepages", "varlog", "kubelet", "varlibcni", "sysctl", "ipam", "volume-plugins", "certs.d"}

// nodeBinds are the node paths that are directories of the node, as the
// holder binds them (holderScript).
var nodeBinds = map[string]string{
	"/run": "run", "/var/log": "varlog", "/var/lib/kubelet": "kubelet", "/var/lib/cni": "varlibcni",
	"/opt/cni/bin": "cni-bin", "/etc/cni/net.d": "net.d", "/var/lib/containers": "varlibcontainers",
	"/var/lib/calico": "varlibcalico",
}

func (c *Cluster) newNode(i int) (*Node, error) {
	name := fmt.Sprintf("podwire-k8s-%d", i+1)
	n := &Node{c: c, Name: name, Index: i, IP: nodeIP(i), Dir: filepath.Join(c.Dir, "nodes", name),
		cgroupRoot: fmt.Sprintf("/%s-%d", filepath.Base(c.Dir), i+1)}
	if c.opts.DualStack || c.opts.IPv6Only {
		n.IP6 = nodeIP6(i)
	}
	if c.opts.Primary == PrimaryPTP {
		n.PodCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 198, byte(i), 0}), 24)
		if c.opts.IPv6Only {
			n.PodCIDR = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 0x01, 0x98, 0, byte(i)}), 64)
		}
	}
	n.CNIBinDir, n.CNIConfDir = filepath.Join(n.Dir, "cni-bin"), filepath.Join(n.Dir, "net.d")
	n.ContainerdSock = filepath.Join(n.Dir, "containerd.sock")
	n.CRISock = n.ContainerdSock
	if c.opts.Runtime.IsCRIO() {
		n.CRISock = n.crioSock()
	}
	n.Kubeconfig = filepath.Join(n.Dir, "kubelet.kubeconfig")
	dirs := nodeDirs
	if c.opts.Runtime.IsCRIO() {
		dirs = append(slices.Clip(dirs), nodeBinds[crioMountpoint])
	}
	if c.opts.Calico {
		dirs = append(slices.Clip(dirs), nodeBinds[calicoMountpoint])
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// nodeIP is node i's uplink address: 10.99.0.1 for the first node (the
// control plane's), then 10.99.0.3, .4, ... (OutsideIP is .2).
func nodeIP(i int) netip.Addr {
	if i == 0 {
		return netip.AddrFrom4([4]byte{10, 99, 0, 1})
	}
	return netip.AddrFrom4([4]byte{10, 99, 0, byte(2 + i)})
}

// nodeIP6 is node i's uplink IPv6 address: fd99::1, fd99::3, ...
func nodeIP6(i int) netip.Addr {
	v4 := nodeIP(i).As4()
	b := LinkPrefix6.Addr().As16()
	b[15] = v4[3]
	return netip.AddrFrom16(b)
}

// inNetNS runs fn on a thread in the network namespace at path.
func inNetNS(path string, fn func() error) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return fn() })
}

// makeSwitch creates the switch namespace (a bridge, br0, with no address:
// the one L2 segment of every uplink) and the outside namespace on it:
// eth0 with OutsideIP/24 (and OutsideIP6/64), the network beyond the nodes.
func (c *Cluster) makeSwitch() error {
	sw, err := testns.Make()
	if err != nil {
		return fmt.Errorf("failed to create the switch netns: %w", err)
	}
	c.SwitchNetNS = sw.Path()
	sw.Close()
	if err := inNetNS(c.SwitchNetNS, func() error {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
		if err := netlink.LinkAdd(br); err != nil {
			return fmt.Errorf("failed to add the switch's bridge: %w", err)
		}
		// No IPv6 address of its own (the switch is not on the segment) and
		// no multicast snooping, so NDP reaches every port at once.
		if err := setSysctls(map[string]string{"net/ipv6/conf/br0/disable_ipv6": "1"}); err != nil {
			return err
		}
		if err := netlink.BridgeSetMcastSnoop(br, false); err != nil {
			return err
		}
		return linkUp("lo", "br0")
	}); err != nil {
		return err
	}
	out, err := testns.Make()
	if err != nil {
		return fmt.Errorf("failed to create the outside netns: %w", err)
	}
	c.OutsideNetNS = out.Path()
	out.Close()
	if err := c.plug(c.OutsideNetNS, "out"); err != nil {
		return err
	}
	return inNetNS(c.OutsideNetNS, func() error {
		if err := addAddr("eth0", netip.PrefixFrom(OutsideIP, LinkPrefix.Bits())); err != nil {
			return err
		}
		if c.opts.DualStack || c.opts.IPv6Only {
			if err := addAddr("eth0", netip.PrefixFrom(OutsideIP6, LinkPrefix6.Bits())); err != nil {
				return err
			}
		}
		return setSysctls(map[string]string{"net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0", "net/ipv4/conf/eth0/rp_filter": "0"})
	})
}

// plug connects the namespace at nsPath to the switch: eth0 there, port
// name on br0, both up.
func (c *Cluster) plug(nsPath, port string) error {
	target, err := ns.GetNS(nsPath)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := inNetNS(c.SwitchNetNS, func() error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: port, MTU: 1500},
			PeerName: "eth0", PeerNamespace: netlink.NsFd(int(target.Fd()))}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("failed to add the switch port %s: %w", port, err)
		}
		return switchPort(port)
	}); err != nil {
		return err
	}
	return inNetNS(nsPath, func() error { return linkUp("lo", "eth0") })
}

// switchPort makes the link port, in the switch's netns (the caller's
// thread is there), a port of the switch's bridge br0, up.
func switchPort(port string) error {
	l, err := netlinksafe.LinkByName(port)
	if err != nil {
		return err
	}
	br, err := netlinksafe.LinkByName("br0")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetMaster(l, br); err != nil {
		return fmt.Errorf("failed to add %s to the switch: %w", port, err)
	}
	return linkUp(port)
}

// makeNetwork creates the node's netns on the switch: IP/24 (and IP6/64)
// on eth0, default routes via the outside, forwarding on and rp_filter off
// (only podwire's source check decides which forged packets pass). The
// outside routes the node's ptp range (PrimaryPTP) to it, and the first
// node also carries Options.OutsideRoutes.
func (n *Node) makeNetwork() error {
	nn, err := testns.Make()
	if err != nil {
		return fmt.Errorf("failed to create the netns of %s: %w", n.Name, err)
	}
	n.NetNS = nn.Path()
	nn.Close()
	if err := n.c.plug(n.NetNS, fmt.Sprintf("n%d", n.Index+1)); err != nil {
		return err
	}
	if err := inNetNS(n.NetNS, func() error {
		if err := addAddr("eth0", netip.PrefixFrom(n.IP, LinkPrefix.Bits())); err != nil {
			return err
		}
		eth0, err := netlinksafe.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.IP(OutsideIP.AsSlice())}); err != nil {
			return fmt.Errorf("failed to add the default route of %s: %w", n.Name, err)
		}
		kv := map[string]string{
			"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0", "net/ipv4/conf/eth0/rp_filter": "0",
		}
		if n.IP6.IsValid() {
			if err := addAddr("eth0", netip.PrefixFrom(n.IP6, LinkPrefix6.Bits())); err != nil {
				return err
			}
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.IP(OutsideIP6.AsSlice())}); err != nil {
				return fmt.Errorf("failed to add the IPv6 default route of %s: %w", n.Name, err)
			}
			kv["net/ipv6/conf/all/forwarding"] = "1"
		}
		return setSysctls(kv)
	}); err != nil {
		return err
	}
	routes := []netip.Prefix{}
	if n.PodCIDR.IsValid() {
		routes = append(routes, n.PodCIDR)
	}
	if n.Index == 0 {
		routes = append(routes, n.c.opts.OutsideRoutes...)
	}
	return inNetNS(n.c.OutsideNetNS, func() error {
		eth0, err := netlinksafe.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, p := range routes {
			gw := n.IP
			if p.Addr().Is6() {
				gw = n.IP6
			}
			if !gw.IsValid() {
				continue // OutsideRoutes of a family the cluster does not run
			}
			_, dst, _ := net.ParseCIDR(p.String())
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: dst, Gw: net.IP(gw.AsSlice())}); err != nil {
				return fmt.Errorf("failed to route %s to %s: %w", p, n.Name, err)
			}
		}
		return nil
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

// addAddr adds p to link without duplicate address detection (every
// address of the run is unique by construction, and DAD would hold an
// IPv6 address tentative for a second or more).
func addAddr(link string, p netip.Prefix) error {
	l, err := netlinksafe.LinkByName(link)
	if err != nil {
		return fmt.Errorf("failed to find %s: %w", link, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := netlink.AddrAdd(l, a); err != nil {
		return fmt.Errorf("failed to add %s to %s: %w", p, link, err)
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

// removeNetNS deletes the namespace bind-mounted at p (its links go with
// it). A plain unmount can fail with EBUSY while a holder's mount
// namespace, which copied the bind mount, is being torn down: then it is
// detached lazily.
func removeNetNS(p string) error {
	if p == "" {
		return nil
	}
	err := unix.Unmount(p, 0)
	if err == unix.EBUSY {
		err = unix.Unmount(p, unix.MNT_DETACH)
	}
	var errs []error
	if err != nil && err != unix.EINVAL && err != unix.ENOENT {
		errs = append(errs, fmt.Errorf("failed to unmount %s: %w", p, err))
	}
	if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// hostMountpoints are the node paths a holder binds a directory of the
// node over: they must exist on the host as mountpoints. /var/lib/kubelet
// is hard-coded in the kubelet (device plugins); /opt/cni/bin and
// /etc/cni/net.d are where DaemonSets (podwire's, flannel's) mount the CNI
// dirs from. CRI-O's nodes add crioMountpoint.
var hostMountpoints = []string{"/var/lib/kubelet", "/var/lib/cni", "/opt/cni/bin", "/etc/cni/net.d"}

// crioMountpoint is where CRI-O's image library keeps its blob-info
// cache, a path it offers no setting for: a CRI-O node binds a directory
// of its own there (the holder binds it when the node has one).
const crioMountpoint = "/var/lib/containers"

// calicoMountpoint is Calico's state on a node (its node name, the MTU
// Felix found), a hostPath of calico-node's that its CNI plugin reads on
// the node: a node of a cluster with Options.Calico binds a directory of
// its own there (the holder binds it when the node has one).
const calicoMountpoint = "/var/lib/calico"

// mountpoints are hostMountpoints, with crioMountpoint when the nodes run
// CRI-O and calicoMountpoint with Options.Calico.
func (c *Cluster) mountpoints() []string {
	mps := hostMountpoints
	if c.opts.Runtime.IsCRIO() {
		mps = append(slices.Clip(mps), crioMountpoint)
	}
	if c.opts.Calico {
		mps = append(slices.Clip(mps), calicoMountpoint)
	}
	return mps
}

// hostDirMark is the extended attribute that marks a directory
// makeHostDirs created: whichever run stops last removes it (two runs of
// the package, such as the single-node and the multi-node suites of make
// test-k8s, may share the mountpoints).
const hostDirMark = "user.podwire-k8s-cluster"

// makeHostDirs creates the host mountpoints paths (and their missing
// parents) when absent, each marked with hostDirMark; removeHostDirs
// removes them.
func makeHostDirs(paths []string) error {
	for _, d := range paths {
		var missing []string
		for p := d; p != "/"; p = filepath.Dir(p) {
			if _, err := os.Stat(p); err == nil {
				break
			}
			missing = append(missing, p)
		}
		for i := len(missing) - 1; i >= 0; i-- {
			err := os.Mkdir(missing[i], 0o755)
			if errors.Is(err, os.ErrExist) {
				continue // another run made it a moment ago
			}
			if err != nil {
				return err
			}
			if err := unix.Setxattr(missing[i], hostDirMark, []byte("integration/k8s/cluster"), 0); err != nil {
				return fmt.Errorf("failed to mark %s: %w", missing[i], err)
			}
		}
	}
	return nil
}

// removeHostDirs removes the marked directories among paths and their
// parents, deepest first, unless a mount namespace of another run still
// mounts something at or below one: removing a mountpoint on the host
// would detach that run's mounts. The last run to stop removes them.
func removeHostDirs(paths []string) error {
	var dirs []string
	for _, d := range paths {
		for p := d; p != "/"; p = filepath.Dir(p) {
			if _, err := unix.Getxattr(p, hostDirMark, nil); err == nil && !slices.Contains(dirs, p) {
				dirs = append(dirs, p)
			}
		}
	}
	// Deepest first: a parent after its children.
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	used := mountedPaths()
	var errs []error
	for _, d := range dirs {
		if slices.ContainsFunc(used, func(m string) bool { return m == d || strings.HasPrefix(m, d+"/") }) {
			continue
		}
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("failed to remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// mountedPaths returns the mount points of every mount namespace that a
// live process is in (field 5 of /proc/PID/mountinfo, proc(5)); processes
// that end while they are read are skipped.
func mountedPaths() []string {
	seen := map[string]bool{}
	var paths []string
	files, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	for _, f := range files {
		ns, err := os.Readlink(filepath.Join(filepath.Dir(f), "ns/mnt"))
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if fields := strings.Fields(line); len(fields) > 4 {
				paths = append(paths, fields[4])
			}
		}
	}
	return paths
}

// makeCgroups creates the kubelet's cgroupRoot in every cgroup hierarchy
// (this host is hybrid v1: the kubelet's cgroupfs driver wants it in each
// controller's hierarchy), cpuset's with its parent's cpus and mems.
func (n *Node) makeCgroups() error {
	// On a pure v2 host (the VM suite's) /sys/fs/cgroup/*/cgroup.procs
	// are child cgroups, an earlier node's root among them, not
	// hierarchies.
	hier := []string{"/sys/fs/cgroup/cgroup.procs"}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		hier, _ = filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	}
	for _, h := range hier {
		parent := filepath.Dir(h)
		d := parent + n.cgroupRoot
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("failed to create cgroup %s: %w", d, err)
		}
		n.cgroupDirs = append(n.cgroupDirs, d)
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

// removeCgroups removes the node's cgroupRoot trees, deepest first.
func (n *Node) removeCgroups() error {
	var errs []error
	for _, root := range n.cgroupDirs {
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
// propagation: nothing mounted here reaches the host). Inside the node its
// mounts are then made shared, as systemd makes a real node's: containerd
// gives a container a HostToContainer (rslave) or Bidirectional (rshared)
// hostPath only from a shared or slave source (Multus's thick DaemonSet
// asks for both), and a mount that is a slave of the host's and shared
// within the node still propagates nothing back. sysfs's net entries
// are those of the mounting namespace, so the node's are bound over
// /sys/class/net and /sys/devices/virtual/net (not over /sys, which would
// hide the cgroup mounts runc and the kubelet need; this is also why daemons
// enter with nsenter and not `ip netns exec`, which remounts /sys). The
// node offers no huge pages (an empty /sys/kernel/mm/hugepages): this
// host's hugetlb cgroup controller is not mounted, so a huge-page limit
// cannot be set, and the kubelet asks the runtime for one (0) per page size
// it finds. containerd ignores them (disable_hugetlb_controller); CRI-O
// passes them to runc, which then fails every container.
const holderScript = `set -e
d=$1
mount -t sysfs sysfs "$d/sys"
mount --bind "$d/sys/class/net" /sys/class/net
mount --bind "$d/sys/devices/virtual/net" /sys/devices/virtual/net
if [ -d /sys/kernel/mm/hugepages ]; then mount --bind "$d/nohugepages" /sys/kernel/mm/hugepages; fi
mount --bind "$d/run" /run
mount --bind "$d/varlog" /var/log
mount --bind "$d/kubelet" /var/lib/kubelet
mount --bind "$d/varlibcni" /var/lib/cni
if [ -d "$d/varlibcontainers" ]; then mount --bind "$d/varlibcontainers" /var/lib/containers; fi
if [ -d "$d/varlibcalico" ]; then mount --bind "$d/varlibcalico" /var/lib/calico; fi
mount --bind "$d/cni-bin" /opt/cni/bin
mount --bind "$d/net.d" /etc/cni/net.d
mount --make-rshared /
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1; do
	k=${kv%%=*}
	f="$d/sysctl/$(printf %s "$k" | tr / _)"
	printf '%s\n' "${kv#*=}" >"$f"
	mount --bind "$f" "/proc/sys/$k"
done
touch "$d/holder.ready"
exec sleep infinity`

// startHolder starts the process that holds the node's mount namespace.
func (n *Node) startHolder(ctx context.Context) error {
	log, err := os.Create(filepath.Join(n.c.Dir, "logs", "holder."+n.Name+".log"))
	if err != nil {
		return err
	}
	defer log.Close()
	n.holder = exec.Command("nsenter", "--net="+n.NetNS, "--",
		"unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", holderScript, "holder", n.Dir)
	n.holder.Stdout, n.holder.Stderr = log, log
	n.holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.holder.Start(); err != nil {
		return fmt.Errorf("failed to start the namespace holder of %s: %w", n.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return n.c.wait(ctx, "the namespace holder of "+n.Name, nil, 20*time.Millisecond, func() error {
		if _, err := os.Stat(filepath.Join(n.Dir, "holder.ready")); err != nil {
			if b, _ := os.ReadFile(log.Name()); len(b) > 0 {
				return fmt.Errorf("%s", b)
			}
			return err
		}
		return nil
	})
}

// Command is bin with args run in the node's network and mount
// namespaces, as the node's own processes see it (e.g. the plugin that the
// agent installed at /opt/cni/bin/podwire, reading /run/podwire).
func (n *Node) Command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	if n.NetNS == "" {
		// A control plane's own host (StartControlPlane): no namespaces of
		// its own to enter.
		return exec.CommandContext(ctx, bin, args...)
	}
	argv := append([]string{"-t", fmt.Sprint(n.holder.Process.Pid), "-m", "-n", "--", bin}, args...)
	return exec.CommandContext(ctx, "nsenter", argv...)
}

// Path returns where the node's path p (e.g. /run/podwire, a hostPath of
// a DaemonSet) is on the host: under the node's directory when p lies in
// one of the node's bound directories, else p itself (the host's file).
func (n *Node) Path(p string) string {
	p = filepath.Clean(p)
	for node, dir := range nodeBinds {
		if rel, err := filepath.Rel(node, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return filepath.Join(n.Dir, dir, rel)
		}
	}
	return p
}

// writePTP writes the ptp conflist (PrimaryConflistBytes).
func (n *Node) writePTP() error {
	n.PrimaryConflist = filepath.Join(n.CNIConfDir, "10-ptp.conflist")
	return os.WriteFile(n.PrimaryConflist, n.PrimaryConflistBytes(), 0o644)
}

// linkPlugins puts the reference plugins into the node's CNI bin dir, as a
// node image ships them (flannel delegates to bridge and host-local;
// kubelet's pods need loopback): copies, not symbolic links, which would
// name a path of the host that a DaemonSet mounting the bin dir (Multus's
// thick daemon, which looks plugins up in its own mount of it) does not
// have, nor hard links, through which a write on a node would change the
// run's build.
func (n *Node) linkPlugins() error {
	for _, p := range []string{"ptp", "bridge", "host-local", "loopback", "portmap", "macvlan"} {
		src, dst := filepath.Join(n.c.opts.CNIBinDir, p), filepath.Join(n.CNIBinDir, p)
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// PrimaryConflistBytes is the ptp primary's conflist as its installer
// writes it (without podwire), at Options.PTPCNIVersion: what a
// flannel-style installer puts back on restart.
func (n *Node) PrimaryConflistBytes() []byte {
	return []byte(fmt.Sprintf(`{
  "cniVersion": %q,
  "name": "k8s-pod-network",
  "plugins": [
    {
      "type": "ptp",
      "mtu": 1500,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": %q}],
        "dataDir": %q
      }
    }
  ]
}
`, n.c.opts.PTPCNIVersion, n.PodCIDR, n.PodCIDR.Addr().Next(), defaultRoute(n.PodCIDR), filepath.Join(n.Dir, "ipam")))
}

// defaultRoute is the default route of p's family.
func defaultRoute(p netip.Prefix) string {
	if p.Addr().Is6() {
		return "::/0"
	}
	return "0.0.0.0/0"
}

// containerdConfigs are the configs of containerd 1.x (version 2) and
// 2.x (version 3, where the CRI plugin is split into
// io.containerd.cri.v1.images, io.containerd.cri.v1.runtime and the server
// io.containerd.grpc.v1.cri), shared with the CRI suite (integration/cri)
// through ContainerdConfig. Both say the same: restrict_oom_score_adj
// because root here lacks CAP_SYS_RESOURCE; the streaming server on the
// node's loopback; CNI dirs of the run; max_conf_num 1 (the first conflist
// is the network, as with a kubelet); registry hosts from {{dir}}/certs.d
// (one hosts.toml per registry, read at each pull: StartRegistry adds the
// run's plain-HTTP registry there). containerd 2's NRI is off: its socket
// is a fixed host path (/var/run/nri), which the CRI suite's containerd,
// sharing the host's /run, would leave behind.
var containerdConfigs = map[int]string{1: `version = 2
root = "{{dir}}/containerd-root"
state = "{{dir}}/containerd-state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{{dir}}/containerd.sock"

[ttrpc]
  address = "{{dir}}/containerd.sock.ttrpc"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{{dir}}/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{{pause}}"
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "{{runc}}"
          Root = "{{dir}}/runc"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "{{dir}}/cni-bin"
      conf_dir = "{{dir}}/net.d"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "{{dir}}/certs.d"
`, 2: `version = 3
root = "{{dir}}/containerd-root"
state = "{{dir}}/containerd-state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri"]

[grpc]
  address = "{{dir}}/containerd.sock"

[ttrpc]
  address = "{{dir}}/containerd.sock.ttrpc"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{{dir}}/opt"
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "{{pause}}"
    [plugins."io.containerd.cri.v1.images".registry]
      config_path = "{{dir}}/certs.d"
  [plugins."io.containerd.cri.v1.runtime"]
    restrict_oom_score_adj = true
    enable_selinux = false
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = "{{runc}}"
          Root = "{{dir}}/runc"
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["{{dir}}/cni-bin"]
      conf_dir = "{{dir}}/net.d"
      max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`}

// ContainerdConfig returns the config of a containerd of major version
// major (1 or 2) whose root, state, sockets, runc root and CNI dirs are
// all under dir, running runc (a path) with sandbox image pause; an error
// for another major version.
func ContainerdConfig(major int, dir, runc, pause string) (string, error) {
	tmpl, ok := containerdConfigs[major]
	if !ok {
		return "", fmt.Errorf("containerd %d.x: no config for it (1.x and 2.x are known)", major)
	}
	return strings.NewReplacer("{{dir}}", dir, "{{runc}}", runc, "{{pause}}", pause).Replace(tmpl), nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	rt := n.c.opts.Runtime
	cfg, err := rt.Config(ctx, n.Dir, PauseImage)
	if err != nil {
		return err
	}
	path := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	bin, err := rt.Bin("containerd")
	if err != nil {
		return err
	}
	p, err := n.c.runEnv(n, "containerd", rt.Environ(), bin, "--config", path)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+n.ContainerdSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	n.cri = runtimeapi.NewRuntimeServiceClient(conn)
	n.criConn = conn
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return n.c.wait(ctx, "containerd's CRI on "+n.Name, p, 100*time.Millisecond, func() error {
		_, err := n.cri.Version(ctx, &runtimeapi.VersionRequest{})
		return err
	})
}

// ImportImage imports an OCI archive (WriteImageArchive) into the node's
// containerd, k8s.io namespace, and returns once the CRI knows every image
// the archive names. Pods use it with imagePullPolicy: Never. containerd
// 2.x's CRI learns of an image that ctr imported from the image-create
// event, which its event monitor handles after the import has returned; a
// pod created in between fails ErrImageNeverPull and waits out the
// kubelet's back-off.
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	if n.c.opts.Runtime.IsCRIO() {
		return fmt.Errorf("%s runs CRI-O, which takes images from registries only: push %s (Cluster.Push) and pull it (Node.PullImage)", n.Name, archive)
	}
	refs, err := archiveRefs(archive)
	if err != nil {
		return err
	}
	ctr, err := n.c.opts.Runtime.Bin("ctr")
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, ctr, "-a", n.ContainerdSock, "-n", "k8s.io", "images", "import",
		"--snapshotter", "overlayfs", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("failed to import %s on %s: %v\n%s", archive, n.Name, err, out)
	}
	images := runtimeapi.NewImageServiceClient(n.criConn)
	for _, ref := range refs {
		for {
			st, err := images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
			if err == nil && st.Image != nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: the CRI does not know %s, imported from %s: %v (%w)", n.Name, ref, archive, err, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// archiveRefs returns the image names of an OCI archive: the
// io.containerd.image.name annotations of its index.json's manifests,
// which ctr names the imported images by (WriteImageArchive writes them).
func archiveRefs(archive string) ([]string, error) {
	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := decodeArchiveFile(archive, "index.json", &index); err != nil {
		return nil, err
	}
	var refs []string
	for _, m := range index.Manifests {
		if ref := m.Annotations["io.containerd.image.name"]; ref != "" {
			refs = append(refs, ref)
		}
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("%s: index.json names no image (io.containerd.image.name)", archive)
	}
	return refs, nil
}

// ArchiveIndexManifests lists the digests of the manifests that the image
// index with digest index ("sha256:...", a blob of the OCI archive) names:
// the platforms' images of a multi-arch index.
func ArchiveIndexManifests(archive, index string) ([]string, error) {
	var idx struct{ Manifests []struct{ Digest string } }
	if err := decodeArchiveFile(archive, "blobs/"+strings.Replace(index, ":", "/", 1), &idx); err != nil {
		return nil, err
	}
	var out []string
	for _, m := range idx.Manifests {
		out = append(out, m.Digest)
	}
	return out, nil
}

// ArchiveIndexSBOM returns the digest of the SBOM manifest that the image
// index with digest index (a blob of the OCI archive) lists, as `make
// image` attaches it: the one manifest of artifactType sbom.MediaType,
// with platform unknown/unknown so that runtimes skip it. An index
// without it, or with it on a platform a node has, is an error.
func ArchiveIndexSBOM(archive, index string) (string, error) {
	var idx struct {
		Manifests []struct {
			Digest, ArtifactType string
			Platform             *struct{ OS, Architecture string }
		}
	}
	if err := decodeArchiveFile(archive, "blobs/"+strings.Replace(index, ":", "/", 1), &idx); err != nil {
		return "", err
	}
	var found []string
	for _, m := range idx.Manifests {
		if m.ArtifactType != sbom.MediaType {
			continue
		}
		if m.Platform == nil || m.Platform.OS != "unknown" || m.Platform.Architecture != "unknown" {
			return "", fmt.Errorf("%s: index %s lists the SBOM %s with platform %+v, want unknown/unknown", archive, index, m.Digest, m.Platform)
		}
		found = append(found, m.Digest)
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%s: index %s lists %d manifests of artifactType %s, want 1", archive, index, len(found), sbom.MediaType)
	}
	return found[0], nil
}

// decodeArchiveFile decodes the JSON file name of an OCI archive (a tar of
// an image layout) into v.
func decodeArchiveFile(archive, name string, v any) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			return fmt.Errorf("%s: no %s: %w", archive, name, err)
		}
		if path.Clean(h.Name) != name {
			continue
		}
		if err := json.NewDecoder(tr).Decode(v); err != nil {
			return fmt.Errorf("%s: %s: %w", archive, name, err)
		}
		return nil
	}
}

// ImportImage imports the OCI archive on every node at once (Node.ImportImage):
// each import is mostly one CPU's work of decompressing and hashing.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	errs := make(chan error, len(c.Nodes))
	for _, n := range c.Nodes {
		go func() { errs <- n.ImportImage(ctx, archive) }()
	}
	var err error
	for range c.Nodes {
		err = errors.Join(err, <-errs)
	}
	return err
}

// kubeletConfig: cgroupfs and failCgroupV1 false (this host is hybrid
// cgroup v1; containerd 2.x reports cgroupfs through the CRI RuntimeConfig
// call, runc's SystemdCgroup being off, and 1.6 does not implement the
// call, so the driver is set here too); oomScoreAdj 0 (root lacks CAP_SYS_RESOURCE);
// protectKernelDefaults with the fake /proc/sys files of the holder;
// eviction and image GC thresholds out of the way of a shared disk;
// clusterDNS and clusterDomain as kubeadm sets them: the kube-dns
// Service's first address (Cluster.ClusterDNS, InstallCoreDNS), the one
// nameserver of the pods' resolv.conf.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {{ca}}
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: {{cgroupRoot}}
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
protectKernelDefaults: true
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
containerRuntimeEndpoint: unix://{{criSock}}
volumePluginDir: {{dir}}/volume-plugins
podLogsDir: /var/log/pods
clusterDNS: ["{{clusterDNS}}"]
clusterDomain: {{clusterDomain}}
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
` + kubeletEviction

// kubeletEviction keeps the eviction manager from evicting on a crowded
// test host: thresholds that only an exhausted one reaches.
const kubeletEviction = `evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
`

func (n *Node) startKubelet() error {
	cfg := strings.NewReplacer("{{ca}}", n.c.pki("ca.crt"), "{{cgroupRoot}}", n.cgroupRoot, "{{dir}}", n.Dir, "{{criSock}}", n.CRISock,
		"{{clusterDNS}}", n.c.ClusterDNS()[0].String(), "{{clusterDomain}}", ClusterDomain).Replace(kubeletConfig)
	if n.c.opts.LeanKubelets {
		cfg = strings.Replace(cfg, kubeletEviction, "evictionHard: {}\nlocalStorageCapacityIsolation: false\n", 1)
	}
	path := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	nodeIPs := n.IP.String()
	switch {
	case n.c.opts.IPv6Only:
		nodeIPs = n.IP6.String()
	case n.IP6.IsValid():
		nodeIPs += "," + n.IP6.String()
	}
	args := []string{"--config=" + path, "--kubeconfig=" + n.Kubeconfig, "--hostname-override=" + n.Name, "--node-ip=" + nodeIPs}
	if len(n.c.opts.RegisterTaints) > 0 {
		args = append(args, "--register-with-taints="+strings.Join(n.c.opts.RegisterTaints, ","))
	}
	if n.c.opts.LeanKubelets {
		args = append(args, "--housekeeping-interval=1m")
	}
	_, err := n.c.run(n, "kubelet", n.c.k8sBin("kubelet"), args...)
	return err
}

// removeAllSandboxes stops and removes every pod sandbox of the node
// through the CRI (containerd runs the CNI DELs), as the kubelet would have.
func (n *Node) removeAllSandboxes(ctx context.Context) error {
	l, err := n.cri.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	for _, s := range l.Items {
		n.c.logf("cleanup: removing sandbox %s/%s on %s", s.Metadata.Namespace, s.Metadata.Name, n.Name)
		n.cri.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id})
		n.cri.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id})
	}
	return nil
}

// CollectSandboxes waits until every CRI sandbox of the pod with uid (a
// pod deleted through the API) is stopped, NOTREADY: the runtime's
// StopPodSandbox has run, with its CNI DEL. Then it removes them as the
// kubelet's container GC does, about once a minute, (RemovePodSandbox,
// with the runtime's second DEL), without waiting for that GC. A removal's
// error (a failed DEL) is returned; a sandbox the GC removed first is
// not an error.
func (n *Node) CollectSandboxes(ctx context.Context, uid string) error {
	for {
		items, err := n.Sandboxes(ctx, uid)
		if err != nil {
			return err
		}
		stopped := true
		for _, s := range items {
			stopped = stopped && s.State != runtimeapi.PodSandboxState_SANDBOX_READY
		}
		if stopped {
			for _, s := range items {
				if err := n.removeSandbox(ctx, s.Id); err != nil {
					return fmt.Errorf("RemovePodSandbox %s of pod uid %s on %s: %w", s.Id, uid, n.Name, err)
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the sandbox of pod uid %s on %s was not stopped: %w", uid, n.Name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// removeSandbox removes a stopped sandbox; one the kubelet's GC removed
// first is not an error. CRI-O fails a removal that races the kubelet's
// removal of the sandbox's containers ("no such id" of a container it was
// deleting), so a failure is tried again, a few times: a failing DEL
// fails every time.
func (n *Node) removeSandbox(ctx context.Context, id string) error {
	var err error
	for range 5 {
		_, err = n.cri.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		if err == nil || status.Code(err) == codes.NotFound {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
	return err
}

// Sandboxes lists the node's CRI sandboxes of the pod with uid (any state).
func (n *Node) Sandboxes(ctx context.Context, uid string) ([]*runtimeapi.PodSandbox, error) {
	l, err := n.cri.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// PodNetNS returns /proc/PID/ns/net of the node's ready sandbox of the pod
// with uid (its pause process), and the sandbox's ID (= CNI_CONTAINERID).
func (n *Node) PodNetNS(ctx context.Context, uid string) (path, sandboxID string, err error) {
	items, err := n.Sandboxes(ctx, uid)
	if err != nil {
		return "", "", err
	}
	for _, s := range items {
		if s.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		st, err := n.cri.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: s.Id, Verbose: true})
		if err != nil {
			return "", "", err
		}
		if n.c.opts.Runtime.IsCRIO() {
			path, err := n.crioNetNS(st.Info["info"])
			return path, s.Id, err
		}
		var info struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid == 0 {
			return "", "", fmt.Errorf("no pid in the verbose status of sandbox %s: %v", s.Id, err)
		}
		return fmt.Sprintf("/proc/%d/ns/net", info.Pid), s.Id, nil
	}
	return "", "", fmt.Errorf("no ready sandbox on %s for pod uid %s", n.Name, uid)
}

// NetworkReady is the runtime's NetworkReady condition as the kubelet reads
// it, from one CRI Status call: its status, and its reason and message
// when false. containerd 2.x runs the network's CNI STATUS (cniVersion
// 1.1.0 or later) within that call.
func (n *Node) NetworkReady(ctx context.Context) (ready bool, reason, message string, err error) {
	st, err := n.cri.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return false, "", "", err
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type == runtimeapi.NetworkReady {
			return c.Status, c.Reason, c.Message, nil
		}
	}
	return false, "", "", fmt.Errorf("the CRI status of %s has no %s condition", n.Name, runtimeapi.NetworkReady)
}

// CNIConfig returns the CNI configuration the node's containerd has
// loaded, as its verbose CRI status reports it (JSON with each network's
// source). CRI-O reports none (ErrNoCNIConfig).
func (n *Node) CNIConfig(ctx context.Context) (string, error) {
	if n.c.opts.Runtime.IsCRIO() {
		return "", ErrNoCNIConfig
	}
	st, err := n.cri.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return "", err
	}
	conf, ok := st.Info["cniconfig"]
	if !ok {
		return "", fmt.Errorf("containerd's verbose status has no cniconfig")
	}
	return conf, nil
}

// ErrNoCNIConfig is CNIConfig's error on a runtime that does not report
// the CNI configuration it loaded (CRI-O).
var ErrNoCNIConfig = errors.New("the runtime does not report the CNI configuration it loaded")

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
