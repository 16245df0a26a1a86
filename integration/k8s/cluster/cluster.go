// Package cluster runs a real single-node Kubernetes cluster for podwire's
// tests: etcd, kube-apiserver (Node,RBAC authorization, certificates made
// by the run), kube-controller-manager, kube-scheduler and a kubelet over a
// private containerd 1.6 (Debian's, with runc), all inside one network
// namespace (the node) and one private mount namespace held by a sleeping
// process (the holder). A second network namespace, joined to the node by
// a veth pair, plays the network outside the node.
//
// The primary network is ptp + host-local written at cniVersion 0.3.1, as
// stock installers write it; the caller chains podwire into it (e.g. with
// `podwire install`) before creating pods.
//
// Nothing of the host is changed but what cannot be avoided, and that is
// undone by Stop: the empty mountpoints /var/lib/kubelet (the kubelet's
// device-plugin path is hard-coded there), /var/lib/cni, /opt/cni/bin and
// /etc/cni/net.d when they did not exist, and a cgroup root of the run in
// every cgroup v1 hierarchy. Inside the mount namespace, /run, /var/log,
// /var/lib/kubelet, /var/lib/cni and the CNI dirs (/opt/cni/bin,
// /etc/cni/net.d) are directories of the run (NodePath maps a node path to
// the run's directory), so a DaemonSet's hostPath volumes land in the run;
// and the four /proc/sys files the
// kubelet would otherwise rewrite host-wide are files of the run holding
// the values it wants (protectKernelDefaults then passes). Every process is
// started by the package and ended by PID (containerd's shims too: they are
// recognised by the run's socket on their command line).
//
// The recipe and its traps: ../shared/k8s-recipe.md (beside the checkout).
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
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Options configure Start. The binaries are required.
type Options struct {
	// K8sBinDir holds kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet and kubectl (scripts/k8s-build.sh).
	K8sBinDir string
	// EtcdBin is the etcd binary.
	EtcdBin string
	// CNIBinDir holds the reference plugins ptp, host-local and loopback;
	// they are linked into the node's own CNI bin dir (Cluster.CNIBinDir).
	CNIBinDir string
	// OutsideRoutes are prefixes the outside network routes to the node
	// (the pod network is always routed).
	OutsideRoutes []netip.Prefix
	// Logf reports progress (default: discard).
	Logf func(format string, args ...any)
	// Keep leaves the run's directory after Stop (for inspection).
	Keep bool
}

// Addresses of the run. They exist only inside the run's namespaces.
var (
	// NodeIP is the node's address on its uplink (eth0 in the node netns).
	NodeIP = netip.MustParseAddr("10.99.0.1")
	// OutsideIP is the outside network's address on the same link: the
	// node's default gateway.
	OutsideIP = netip.MustParseAddr("10.99.0.2")
	// LinkPrefix is the node's uplink subnet.
	LinkPrefix = netip.MustParsePrefix("10.99.0.0/24")
	// PodCIDR is the ptp + host-local range of the pods.
	PodCIDR = netip.MustParsePrefix("10.198.0.0/24")
	// ServiceCIDR is the apiserver's service range (no kube-proxy runs).
	ServiceCIDR = netip.MustParsePrefix("10.96.0.0/12")
)

// NodeName is the Kubernetes name of the node.
const NodeName = "podwire-k8s"

// Cluster is a running cluster. Its fields are read-only.
type Cluster struct {
	opts Options
	logf func(string, ...any)

	// Dir is the run's directory: configs, certificates, data, logs.
	Dir string
	// NodeNetNS and OutsideNetNS are the paths of the two network
	// namespaces (bind mounts under /run/netns).
	NodeNetNS, OutsideNetNS string
	// CNIBinDir and CNIConfDir are the node's CNI directories (containerd's
	// bin_dir and conf_dir).
	CNIBinDir, CNIConfDir string
	// PrimaryConflist is the ptp + host-local conflist in CNIConfDir.
	PrimaryConflist string
	// AdminKubeconfig is a system:masters kubeconfig; KubeletKubeconfig is
	// the node's own (system:node:NodeName, group system:nodes), which the
	// Node authorizer limits to this node's objects. Both reach the
	// apiserver at https://127.0.0.1:6443 from the node netns.
	AdminKubeconfig, KubeletKubeconfig string
	// ContainerdSock is containerd's gRPC socket.
	ContainerdSock string

	holder *exec.Cmd
	procs  []*proc // started daemons, in start order

	criConn *grpc.ClientConn
	cri     runtimeapi.RuntimeServiceClient
	images  runtimeapi.ImageServiceClient
	api     *http.Client // the apiserver as admin, dialing in the node netns

	registry *http.Server // StartRegistry's, or nil

	cgroupRoot string   // kubelet's cgroupRoot, e.g. /podwire-k8s-123
	cgroupDirs []string // the cgroupRoot dirs made in each hierarchy
	hostDirs   []string // host mountpoints made by Start, removed by Stop
	stopOnce   sync.Once
	stopErr    error
}

// proc is a daemon of the cluster.
type proc struct {
	name   string
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

// Start brings the cluster up: the node is Ready and schedulable when it
// returns, the pause image is imported, the default ServiceAccount of the
// default namespace exists. On error, what was started is stopped.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"} {
		if _, err := os.Stat(filepath.Join(opts.K8sBinDir, b)); err != nil {
			return nil, fmt.Errorf("missing %s in %q (run scripts/k8s-build.sh): %w", b, opts.K8sBinDir, err)
		}
	}
	if _, err := os.Stat(opts.EtcdBin); err != nil {
		return nil, fmt.Errorf("missing etcd: %w", err)
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "unshare", "sleep"} {
		if _, err := exec.LookPath(b); err != nil {
			return nil, fmt.Errorf("%s not found (scripts/install-deps.sh): %w", b, err)
		}
	}
	dir, err := os.MkdirTemp("", "podwire-k8s-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{opts: opts, logf: opts.Logf, Dir: dir,
		CNIBinDir: filepath.Join(dir, "cni-bin"), CNIConfDir: filepath.Join(dir, "net.d"),
		ContainerdSock:    filepath.Join(dir, "containerd.sock"),
		AdminKubeconfig:   filepath.Join(dir, "admin.kubeconfig"),
		KubeletKubeconfig: filepath.Join(dir, "kubelet.kubeconfig"),
		cgroupRoot:        "/" + filepath.Base(dir),
	}
	defer func() {
		if err != nil {
			c.logf("cluster start failed: %v; logs in %s", err, filepath.Join(dir, "logs"))
			c.Stop()
		}
	}()
	start := time.Now()
	step := func(what string) { c.logf("%-28s %6.1fs", what, time.Since(start).Seconds()) }

	for _, d := range []string{"cni-bin", "net.d", "run", "logs", "sys", "varlog", "kubelet", "varlibcni", "sysctl", "ipam", "pki", "etcd", "manifests", "volume-plugins", "flex", "kubectl-cache", "apiserver-certs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return c, err
		}
	}
	if err := c.makeNetwork(); err != nil {
		return c, err
	}
	if err := c.makeHostDirs(); err != nil {
		return c, err
	}
	if err := c.makeCgroups(); err != nil {
		return c, err
	}
	if err := c.startHolder(ctx); err != nil {
		return c, err
	}
	step("namespaces ready")
	if err := c.writePKI(); err != nil {
		return c, err
	}
	step("certificates written")
	if err := c.writeCNI(); err != nil {
		return c, err
	}

	if err := c.startEtcd(ctx); err != nil {
		return c, err
	}
	step("etcd healthy")
	if err := c.startContainerd(ctx); err != nil {
		return c, err
	}
	archive, err := BuildPauseArchive(dir, PauseImage)
	if err != nil {
		return c, err
	}
	if err := c.ImportImage(ctx, archive); err != nil {
		return c, err
	}
	step("containerd up, pause imported")
	if err := c.startAPIServer(ctx); err != nil {
		return c, err
	}
	step("apiserver ready")
	if err := c.startControllers(); err != nil {
		return c, err
	}
	if err := c.startKubelet(); err != nil {
		return c, err
	}
	if err := c.waitNodeSchedulable(ctx); err != nil {
		return c, err
	}
	step("node Ready, no taints")
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
	// The kubelet first, so it does not restart what is torn down below.
	for _, name := range []string{"kubelet", "kube-controller-manager", "kube-scheduler"} {
		if p := c.proc(name); p != nil {
			errs = append(errs, c.end(p))
		}
	}
	if p := c.proc("containerd"); p != nil && p.running() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		errs = append(errs, c.removeAllSandboxes(ctx))
		cancel()
	}
	if c.criConn != nil {
		c.criConn.Close()
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		errs = append(errs, c.end(c.procs[i]))
	}
	errs = append(errs, c.stopRegistry())
	// Shims daemonize away from containerd: end those of this run only.
	for _, pid := range ProcessesMentioning(c.ContainerdSock) {
		c.logf("cleanup: killing leftover shim %d", pid)
		syscall.Kill(pid, syscall.SIGKILL)
		waitGone(pid, 5*time.Second)
	}
	if c.holder != nil && c.holder.Process != nil {
		c.holder.Process.Kill()
		c.holder.Wait()
	}
	errs = append(errs, c.removeCgroups())
	for i := len(c.hostDirs) - 1; i >= 0; i-- {
		if err := os.Remove(c.hostDirs[i]); err != nil {
			errs = append(errs, fmt.Errorf("failed to remove %s: %w", c.hostDirs[i], err))
		}
	}
	errs = append(errs, c.removeNetwork())
	if !c.opts.Keep {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
	} else {
		c.logf("keeping %s", c.Dir)
	}
	return errors.Join(errs...)
}

// proc returns the daemon called name, or nil.
func (c *Cluster) proc(name string) *proc {
	for _, p := range c.procs {
		if p.name == name {
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
		c.logf("cleanup: %s did not stop on SIGTERM, killing %d", p.name, p.cmd.Process.Pid)
		p.cmd.Process.Kill()
		<-p.exited
	}
	p.log.Close()
	return nil
}

// run starts a daemon in the node's network and mount namespaces, its
// output in logs/NAME.log.
func (c *Cluster) run(name, bin string, args ...string) (*proc, error) {
	log, err := os.Create(filepath.Join(c.Dir, "logs", name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := c.NodeCommand(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group: a ^C of the test reaches the test only, which
	// then stops the daemons in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("failed to start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	c.procs = append(c.procs, p)
	return p, nil
}

// NodeCommand is bin with args run in the node's network and mount
// namespaces, as the node's own processes see it (e.g. the plugin that the
// agent installed at /opt/cni/bin/podwire, reading /run/podwire).
func (c *Cluster) NodeCommand(ctx context.Context, bin string, args ...string) *exec.Cmd {
	argv := append([]string{"-t", fmt.Sprint(c.holder.Process.Pid), "-m", "-n", "--", bin}, args...)
	return exec.CommandContext(ctx, "nsenter", argv...)
}

// nodeBinds are the node paths that are directories of the run, as the
// holder binds them (holderScript).
var nodeBinds = map[string]string{
	"/run": "run", "/var/log": "varlog", "/var/lib/kubelet": "kubelet", "/var/lib/cni": "varlibcni",
	"/opt/cni/bin": "cni-bin", "/etc/cni/net.d": "net.d",
}

// NodePath returns where the node's path p (e.g. /run/podwire, a hostPath of
// a DaemonSet) is on the host: under the run's directory when p lies in one
// of the node's bound directories, else p itself (the host's file).
func (c *Cluster) NodePath(p string) string {
	p = filepath.Clean(p)
	for node, dir := range nodeBinds {
		if rel, err := filepath.Rel(node, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return filepath.Join(c.Dir, dir, rel)
		}
	}
	return p
}

// LogTail returns the last n bytes of a daemon's log (etcd, containerd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet).
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
			return fmt.Errorf("%s exited while waiting for %s: %v\n%s", p.name, what, last, c.LogTail(p.name, 4000))
		}
		select {
		case <-ctx.Done():
			tail := ""
			if p != nil {
				tail = "\n" + c.LogTail(p.name, 4000)
			}
			return fmt.Errorf("timed out waiting for %s: %v%s", what, last, tail)
		case <-time.After(interval):
		}
	}
}

// dialer dials TCP inside a network namespace: the socket belongs to the
// namespace of the thread that made it, and stays there.
func dialer(nsPath string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
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
