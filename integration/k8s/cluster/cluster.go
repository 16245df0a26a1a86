// Package cluster runs a real Kubernetes cluster of one node or more for
// podwire's tests: etcd, kube-apiserver (Node,RBAC authorization,
// certificates made by the run), kube-controller-manager and
// kube-scheduler on the first node, and on every node a kubelet over a
// private containerd with runc (Options.Runtime: containerd 2.x of
// scripts/containerd-build.sh, or the host's 1.6, the legacy leg). Each node is a network
// namespace plus a private mount namespace held by a sleeping process (the
// holder), with its own cgroup root. The nodes' uplinks share one L2
// segment (a bridge in a switch namespace), and the network outside the
// nodes (another namespace: their default gateway, the run's registry) is
// on that segment too. Options.DualStack gives every uplink an IPv6
// address too, and the Services and node pod ranges both families.
//
// The primary network is either ptp + host-local written by Start at
// Options.PTPCNIVersion (PrimaryPTP), or none
// (PrimaryNone): the caller installs one, as flannel's own manifest does,
// and the controller-manager allocates each node's podCIDRs.
//
// Nothing of the host is changed but what cannot be avoided, and that is
// undone by Stop: the empty mountpoints /var/lib/kubelet (the kubelet's
// device-plugin path is hard-coded there), /var/lib/cni, /opt/cni/bin and
// /etc/cni/net.d when they did not exist (shared by the runs on the host at
// once, and removed by the last one to stop), and a cgroup root per node in
// every cgroup v1 hierarchy. Inside a node's mount namespace, /run,
// /var/log, /var/lib/kubelet, /var/lib/cni and the CNI dirs (/opt/cni/bin,
// /etc/cni/net.d) are directories of the node (Node.Path maps a node path
// to the run's directory), so a DaemonSet's hostPath volumes land in the
// run; and the four /proc/sys files the kubelet would otherwise rewrite
// host-wide are files of the run holding the values it wants
// (protectKernelDefaults then passes). Every process is started by the
// package and ended by PID (containerd's shims too: they are recognised by
// their node's socket on their command line).
//
// The recipe and its traps: docs/testing.md, "How a node is built".
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Primary is the pod network Start provides.
type Primary string

const (
	// PrimaryPTP: ptp + host-local on every node, Node.PodCIDR each, the
	// outside routing each range to its node (the default).
	PrimaryPTP Primary = "ptp"
	// PrimaryNone: no conflist; the controller-manager allocates each
	// node's podCIDRs from ClusterCIDR (and ClusterCIDR6), and the caller
	// installs the pod network (e.g. flannel's DaemonSet), then calls
	// WaitNodesReady.
	PrimaryNone Primary = "none"
)

// Options configure Start. The binaries are required.
type Options struct {
	// K8sBinDir holds kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet and kubectl (scripts/k8s-build.sh).
	K8sBinDir string
	// EtcdBin is the etcd binary.
	EtcdBin string
	// Runtime is every node's containerd and runc (Suite.Main sets it
	// from RuntimeFromEnv; the zero value is the host's, on PATH).
	Runtime Runtime
	// CNIBinDir holds the reference plugins (ptp, bridge, host-local,
	// loopback, portmap, macvlan); they are linked into each node's CNI
	// bin dir.
	CNIBinDir string
	// Nodes is the number of nodes (default 1).
	Nodes int
	// Primary is the pod network (default PrimaryPTP).
	Primary Primary
	// PTPCNIVersion is the cniVersion of the ptp conflist (PrimaryPTP;
	// default 0.3.1, what flannel's, Calico's and Cilium's installers
	// still write). At 1.1.0 containerd 2.x calls the chain's STATUS
	// (its CRI Status, NetworkReady).
	PTPCNIVersion string
	// Calico gives every node a /var/lib/calico of its own, for Calico
	// installed as an add-on (InstallCalico, with PrimaryNone).
	Calico bool
	// DualStack adds IPv6: uplink addresses, Services (ServiceCIDR6) and,
	// with PrimaryNone, node pod ranges (ClusterCIDR6).
	DualStack bool
	// IPv6Only makes the Kubernetes cluster single-stack IPv6 (PrimaryPTP
	// only): the nodes' IPs (the kubelets' --node-ip, the apiserver's
	// advertise address), the Services (ServiceCIDR6 alone) and the ptp
	// ranges (Node.PodCIDR in IPv6). The uplinks keep an IPv4 address too,
	// the infrastructure's: the run's registry and the components'
	// kubeconfigs use it.
	IPv6Only bool
	// OutsideRoutes are prefixes the outside network routes to the first
	// node (the ptp pod ranges are always routed to their nodes); an IPv6
	// one only when the nodes have IPv6 addresses.
	OutsideRoutes []netip.Prefix
	// RegisterTaints are taints every kubelet registers its Node with
	// (--register-with-taints, KEY=[VALUE]:EFFECT), as an operator's
	// startup taints; WaitNodesReady does not wait for them to go.
	RegisterTaints []string
	// PauseArchive is an archive of PauseImage that BuildPauseArchive
	// wrote earlier; "" builds one, which needs the Go toolchain (the VM
	// suite has none: scripts/vm-test.sh builds it on the host with
	// vmimages).
	PauseArchive string
	// ImageTool is the tools/image binary PushArchive runs; "" runs it
	// with go run (the VM suite has no Go toolchain).
	ImageTool string
	// ControlPlane is the directory of a control plane run elsewhere
	// (StartControlPlane, e.g. on the host of a VM whose nodes these
	// are): its CA under pki/ and its apiserver's URL in the file url.
	// Start then runs no etcd, apiserver, controller-manager or scheduler
	// and joins the nodes to that apiserver. "" runs them in the first
	// node's namespaces.
	ControlPlane string
	// ControlPlaneNIC is the link that reaches ControlPlane's segment; Start
	// makes it a port of the uplinks' switch.
	ControlPlaneNIC string
	// LeanKubelets turns off what the kubelets spend CPU on at rest that
	// no suite reads: the eviction manager's every-10-s summary of the
	// node's stats (no thresholds, no local storage accounting) and
	// cAdvisor's per-container housekeeping, every minute instead of every
	// 10 s. Under TCG, kubelets at rest are a large share of the VM's CPU.
	LeanKubelets bool
	// Logf reports progress (default: discard).
	Logf func(format string, args ...any)
	// Keep leaves the run's directory after Stop (for inspection).
	Keep bool
}

// Addresses of the run. They exist only inside the run's namespaces.
var (
	// LinkPrefix and LinkPrefix6 are the uplinks' segment; Node.IP and
	// Node.IP6 are the nodes' addresses on it.
	LinkPrefix  = netip.MustParsePrefix("10.99.0.0/24")
	LinkPrefix6 = netip.MustParsePrefix("fd99::/64")
	// OutsideIP and OutsideIP6 are the outside network's addresses on the
	// segment: the nodes' default gateway.
	OutsideIP  = netip.MustParseAddr("10.99.0.2")
	OutsideIP6 = netip.MustParseAddr("fd99::2")
	// ClusterCIDR and ClusterCIDR6 are the controller-manager's
	// --cluster-cidr with PrimaryNone: a /24 and a /64 per node.
	ClusterCIDR  = netip.MustParsePrefix("10.244.0.0/16")
	ClusterCIDR6 = netip.MustParsePrefix("fd00:10:244::/56")
	// ServiceCIDR and ServiceCIDR6 are the apiserver's service ranges
	// (ServiceCIDR6 only when dual-stack). Not kubeadm's 10.96.0.0/12: that
	// holds LinkPrefix, and kube-proxy drops traffic to every address of
	// the service range that is not a ClusterIP.
	ServiceCIDR  = netip.MustParsePrefix("10.96.0.0/16")
	ServiceCIDR6 = netip.MustParsePrefix("fd00:10:96::/112")
)

// Cluster is a running cluster. Its fields are read-only.
type Cluster struct {
	opts Options
	logf func(string, ...any)

	// Dir is the run's directory: certificates, etcd's data, logs, and one
	// directory per node (Node.Dir).
	Dir string
	// Nodes are the nodes, the control plane's first.
	Nodes []*Node
	// SwitchNetNS holds the bridge of the uplinks' segment; OutsideNetNS
	// is the network outside the nodes, on that segment.
	SwitchNetNS, OutsideNetNS string
	// AdminKubeconfig is a system:masters kubeconfig reaching the
	// apiserver at https://127.0.0.1:6443 from the first node's netns.
	AdminKubeconfig string

	procs    []*proc      // started daemons, in start order
	cp       *Node        // where the control plane runs, or dials it from
	apiURL   string       // the apiserver's URL as c.api and the admin reach it
	remoteIP netip.Addr   // a control plane's run elsewhere (Options.ControlPlane)
	api      *http.Client // the apiserver as admin, dialing in c.cp's netns
	registry *http.Server // StartRegistry's, or nil
	stopOnce sync.Once
	stopErr  error
}

// proc is a daemon of the cluster.
type proc struct {
	name   string
	node   *Node // where it runs
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{}
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Start brings the cluster up. With PrimaryPTP every node is Ready and
// schedulable when it returns; with PrimaryNone every node is registered
// (not Ready until the caller's pod network writes its conflist). The
// pause image is imported on every node and the default ServiceAccount of
// the default namespace exists. On error, what was started is stopped.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Nodes == 0 {
		opts.Nodes = 1
	}
	if opts.Primary == "" {
		opts.Primary = PrimaryPTP
	}
	if opts.PTPCNIVersion == "" {
		opts.PTPCNIVersion = "0.3.1"
	}
	if opts.IPv6Only && (opts.DualStack || opts.Primary != PrimaryPTP) {
		return nil, fmt.Errorf("IPv6Only: a ptp primary and not DualStack")
	}
	if opts.Nodes < 1 || opts.Nodes > 200 {
		return nil, fmt.Errorf("Nodes %d: want 1 to 200", opts.Nodes)
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"} {
		if _, err := os.Stat(filepath.Join(opts.K8sBinDir, b)); err != nil {
			return nil, fmt.Errorf("missing %s in %q (run scripts/k8s-build.sh): %w", b, opts.K8sBinDir, err)
		}
	}
	if _, err := os.Stat(opts.EtcdBin); err != nil {
		return nil, fmt.Errorf("missing etcd: %w", err)
	}
	if err := opts.Runtime.Check(); err != nil {
		return nil, err
	}
	for _, b := range []string{"nsenter", "unshare", "sleep"} {
		if _, err := exec.LookPath(b); err != nil {
			return nil, fmt.Errorf("%s not found (scripts/install-deps.sh): %w", b, err)
		}
	}
	dir, err := os.MkdirTemp("", "podwire-k8s-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{opts: opts, logf: opts.Logf, Dir: dir, AdminKubeconfig: filepath.Join(dir, "admin.kubeconfig"), apiURL: apiServer}
	if opts.ControlPlane != "" {
		if c.apiURL, c.remoteIP, err = readControlPlaneURL(opts.ControlPlane); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			c.logf("cluster start failed: %v; logs in %s", err, filepath.Join(dir, "logs"))
			c.Stop()
		}
	}()
	start := time.Now()
	step := func(what string) { c.logf("%-28s %6.1fs", what, time.Since(start).Seconds()) }

	for _, d := range []string{"logs", "pki", "etcd", "flex", "kubectl-cache", "apiserver-certs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return c, err
		}
	}
	if err := c.makeSwitch(); err != nil {
		return c, err
	}
	if opts.ControlPlaneNIC != "" {
		if err := c.plugControlPlaneNIC(); err != nil {
			return c, err
		}
	}
	if err := makeHostDirs(c.mountpoints()); err != nil {
		return c, err
	}
	for i := 0; i < opts.Nodes; i++ {
		n, err := c.newNode(i)
		if err != nil {
			return c, err
		}
		c.Nodes = append(c.Nodes, n)
		c.cp = c.Nodes[0]
		if err := n.makeNetwork(); err != nil {
			return c, err
		}
		if err := n.makeCgroups(); err != nil {
			return c, err
		}
		if err := n.startHolder(ctx); err != nil {
			return c, err
		}
		if err := n.linkPlugins(); err != nil {
			return c, err
		}
		if opts.Primary == PrimaryPTP {
			if err := n.writePTP(); err != nil {
				return c, err
			}
		}
	}
	step(fmt.Sprintf("%d node namespaces ready", opts.Nodes))
	if err := c.writePKI(); err != nil {
		return c, err
	}
	step("certificates written")

	if opts.ControlPlane == "" {
		if err := c.startEtcd(ctx); err != nil {
			return c, err
		}
		step("etcd healthy")
	}
	if opts.Runtime.IsCRIO() {
		if err := c.startCRIO(ctx, dir); err != nil {
			return c, err
		}
		step("CRI-O up, pause pulled")
	} else {
		archive := opts.PauseArchive
		if archive == "" {
			if archive, err = BuildPauseArchive(dir, PauseImage); err != nil {
				return c, err
			}
		}
		for _, n := range c.Nodes {
			if err := n.startContainerd(ctx); err != nil {
				return c, err
			}
		}
		if err := c.ImportImage(ctx, archive); err != nil {
			return c, err
		}
		step("containerd up, pause imported")
	}
	if opts.ControlPlane == "" {
		if err := c.startAPIServer(ctx); err != nil {
			return c, err
		}
		step("apiserver ready")
		if err := c.startControllers(); err != nil {
			return c, err
		}
	} else {
		if err := c.waitRemoteAPIServer(ctx); err != nil {
			return c, err
		}
		step("apiserver " + c.apiURL + " ready")
	}
	for _, n := range c.Nodes {
		if err := n.startKubelet(); err != nil {
			return c, err
		}
	}
	if opts.Primary == PrimaryPTP {
		if err := c.WaitNodesReady(ctx); err != nil {
			return c, err
		}
	} else if err := c.waitNodesRegistered(ctx); err != nil {
		return c, err
	}
	step("nodes registered")
	if err := c.WaitServiceAccount(ctx, "default"); err != nil {
		return c, err
	}
	step("default ServiceAccount")
	return c, nil
}

// Stop ends every process of the run by PID (pods' sandboxes are stopped
// and removed through the CRI first, so that their CNI DELs run), removes
// the cgroups, namespaces and host mountpoints made by Start, and the run's
// directory (unless Options.Keep). It is idempotent and returns every
// error it met.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	var errs []error
	// The kubelets first, so they do not restart what is torn down below.
	for _, p := range c.procs {
		if p.name == "kubelet" || p.name == "kube-controller-manager" || p.name == "kube-scheduler" {
			errs = append(errs, c.end(p))
		}
	}
	for _, n := range c.Nodes {
		p := c.proc(n, "containerd")
		if p == nil {
			p = c.proc(n, "crio")
		}
		if p != nil && p.running() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			errs = append(errs, n.removeAllSandboxes(ctx))
			cancel()
		}
		if n.criConn != nil {
			n.criConn.Close()
		}
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		errs = append(errs, c.end(c.procs[i]))
	}
	errs = append(errs, c.stopRegistry())
	for _, n := range c.Nodes {
		// Shims daemonize away from containerd: end those of this run only.
		for _, pid := range ProcessesMentioning(n.ContainerdSock) {
			c.logf("cleanup: killing leftover shim %d", pid)
			syscall.Kill(pid, syscall.SIGKILL)
			waitGone(pid, 5*time.Second)
		}
		n.stopCRIOLeftovers()
		if n.holder != nil && n.holder.Process != nil {
			n.holder.Process.Kill()
			n.holder.Wait()
		}
		errs = append(errs, n.removeCgroups())
	}
	errs = append(errs, removeHostDirs(c.mountpoints()))
	for _, n := range c.Nodes {
		errs = append(errs, removeNetNS(n.NetNS))
	}
	errs = append(errs, removeNetNS(c.OutsideNetNS), removeNetNS(c.SwitchNetNS))
	if !c.opts.Keep {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
	} else {
		c.logf("keeping %s", c.Dir)
	}
	return errors.Join(errs...)
}

// IPv6Only reports whether the cluster is single-stack IPv6
// (Options.IPv6Only).
func (c *Cluster) IPv6Only() bool { return c.opts.IPv6Only }

// DualStack reports whether the cluster is dual-stack (Options.DualStack).
func (c *Cluster) DualStack() bool { return c.opts.DualStack }

// Runtime is the nodes' container runtime.
func (c *Cluster) Runtime() Runtime { return c.opts.Runtime }

// forget drops an ended daemon from the run's list (before it is started
// again).
func (c *Cluster) forget(p *proc) {
	for i, q := range c.procs {
		if q == p {
			c.procs = append(c.procs[:i], c.procs[i+1:]...)
			return
		}
	}
}

// proc returns the daemon called name on node n, or nil.
func (c *Cluster) proc(n *Node, name string) *proc {
	for _, p := range c.procs {
		if p.name == name && p.node == n {
			return p
		}
	}
	return nil
}

// end stops a daemon: SIGTERM, then SIGKILL after 15 s.
func (c *Cluster) end(p *proc) error {
	if !p.running() {
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		c.logf("cleanup: %s on %s did not stop on SIGTERM, killing %d", p.name, p.node.Name, p.cmd.Process.Pid)
		p.cmd.Process.Kill()
		<-p.exited
	}
	p.log.Close()
	return nil
}

// logName names a daemon's log in the run's logs/ (LogTail): NAME for the
// control plane's, NAME.NODE for a node's containerd and kubelet.
func logName(n *Node, name string) string {
	if name == "containerd" || name == "crio" || name == "kubelet" {
		return name + "." + n.Name
	}
	return name
}

// run starts a daemon in node n's network and mount namespaces, its
// output in logs/ (logName).
func (c *Cluster) run(n *Node, name, bin string, args ...string) (*proc, error) {
	return c.runEnv(n, name, nil, bin, args...)
}

// runEnv is run with the environment env (nil: the test's).
func (c *Cluster) runEnv(n *Node, name string, env []string, bin string, args ...string) (*proc, error) {
	// Appended to: a daemon restarted (RestartCRIO) keeps its first log.
	log, err := os.OpenFile(filepath.Join(c.Dir, "logs", logName(n, name)+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := n.Command(context.Background(), bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group: a ^C of the test reaches the test only, which
	// then stops the daemons in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("failed to start %s on %s: %w", name, n.Name, err)
	}
	p := &proc{name: name, node: n, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	c.procs = append(c.procs, p)
	return p, nil
}

// LogTail returns the last n bytes of a daemon's log: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, or
// containerd.NODE and kubelet.NODE.
func (c *Cluster) LogTail(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "logs", name+".log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// wait polls cond every interval until it is true, ctx ends, or p (if not
// nil) exits; the error names what and carries the last condition error.
func (c *Cluster) wait(ctx context.Context, what string, p *proc, interval time.Duration, cond func() error) error {
	var last error
	for {
		if last = cond(); last == nil {
			return nil
		}
		if p != nil && !p.running() {
			return fmt.Errorf("%s exited while waiting for %s: %v\n%s", p.name, what, last, c.LogTail(logName(p.node, p.name), 4000))
		}
		select {
		case <-ctx.Done():
			tail := ""
			if p != nil {
				tail = "\n" + c.LogTail(logName(p.node, p.name), 4000)
			}
			return fmt.Errorf("timed out waiting for %s: %v%s", what, last, tail)
		case <-time.After(interval):
		}
	}
}

// HTTPClientIn is an HTTP client whose connections are made inside the
// network namespace nsPath (e.g. OutsideNetNS, where a Prometheus outside
// the nodes would scrape from).
func HTTPClientIn(nsPath string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: dialer(nsPath)}, Timeout: 5 * time.Second}
}

// dialer dials TCP inside a network namespace: the socket belongs to the
// namespace of the thread that made it, and stays there.
func dialer(nsPath string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if nsPath == "" {
			return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
		}
		var conn net.Conn
		err := inNetNS(nsPath, func() error {
			var err error
			d := net.Dialer{Timeout: 2 * time.Second}
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}
