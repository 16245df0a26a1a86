package cri

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/internal/testns"
)

// node is a private containerd with runc (cluster.RuntimeFromEnv: the build
// PODWIRE_CONTAINERD_DIR names, or the host's 1.6, the legacy leg) running
// in a fresh network namespace: the pods' host-side veths, routes and nftables tables
// live in that namespace, which plays the node, and vanish with it. Its
// config, socket, root, state, runc root and CNI dirs are under one temp dir.
type node struct {
	dir      string
	netns    ns.NetNS // the node's network namespace
	rt       cluster.Runtime
	sock     string
	confDir  string
	binDir   string
	cmd      *exec.Cmd
	log      *os.File
	exited   chan struct{} // closed when containerd has exited
	conn     *grpc.ClientConn
	runtime  runtimeapi.RuntimeServiceClient
	images   runtimeapi.ImageServiceClient
	shutdown bool
	// cgroupParent groups the sandboxes' cgroups (cgroupfs driver) under a
	// name of this run, removed at the end in every hierarchy.
	cgroupParent string
	// shimDirs are the shim socket dirs (hard-coded /run/containerd/s in
	// containerd 1.6 and 2.x) that did not exist before and are removed if empty.
	shimDirs []string
}

// pauseImage is the sandbox image the test builds (cluster.BuildPauseArchive)
// and imports: no registry is reachable, and the CRI plugin pulls
// sandbox_image only when it is not already in the k8s.io namespace.
const pauseImage = "docker.io/podwire/pause:e2e"

// launchScript runs in the node's network namespace and a private (slave)
// mount namespace: sysfs's net entries are those of the mounting namespace,
// so the node's are mounted over /sys/class/net and /sys/devices/virtual/net
// (not over /sys, which would hide the cgroup mounts runc needs).
const launchScript = `set -e
mount -t sysfs sysfs "$1/sys"
mount --bind "$1/sys/class/net" /sys/class/net
mount --bind "$1/sys/devices/virtual/net" /sys/devices/virtual/net
shift
exec "$@"`

// startNode starts containerd and imports the pause image. A runtime that
// PODWIRE_CONTAINERD_DIR or PODWIRE_RUNC names and that is missing fails
// the test; the host's, missing, skips it.
func startNode(t *testing.T) *node {
	t.Helper()
	rt := cluster.RuntimeFromEnv()
	if err := rt.Check(); err != nil {
		if rt.Dir != "" || rt.Runc != "" {
			t.Fatal(err)
		}
		t.Skipf("%v (apt-get install containerd runc)", err)
	}
	for _, b := range []string{"nsenter", "unshare"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not found (apt-get install util-linux): %v", b, err)
		}
	}
	dir, err := os.MkdirTemp("", "podwire-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{dir: dir, rt: rt, sock: filepath.Join(dir, "containerd.sock"),
		confDir: filepath.Join(dir, "net.d"), binDir: filepath.Join(dir, "cni-bin")}
	n.cgroupParent = "/" + filepath.Base(dir)
	for _, d := range []string{"/run/containerd", "/run/containerd/s"} {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			n.shimDirs = append([]string{d}, n.shimDirs...)
		}
	}
	t.Cleanup(func() { n.stop(t) })
	for _, d := range []string{n.confDir, n.binDir, filepath.Join(dir, "sys"), filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// lo is up: the streaming server listens on the node's loopback.
	if n.netns, err = testns.Make(); err != nil {
		t.Fatalf("failed to create the node's netns: %v", err)
	}
	cfg, err := rt.Config(context.Background(), dir, pauseImage)
	if err != nil {
		t.Fatal(err)
	}
	containerd, _ := rt.Bin("containerd")
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if n.log, err = os.Create(filepath.Join(dir, "containerd.log")); err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command("nsenter", "--net="+n.netns.Path(), "--",
		"unshare", "--mount", "--propagation", "slave", "--",
		"sh", "-c", launchScript, "launch", dir, containerd, "--config", cfgPath)
	n.cmd.Env = rt.Environ()
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("failed to start containerd: %v", err)
	}
	n.exited = make(chan struct{})
	go func() { n.cmd.Wait(); close(n.exited) }()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if n.conn, err = grpc.NewClient("unix://"+n.sock, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatalf("failed to dial %s: %v", n.sock, err)
	}
	n.runtime = runtimeapi.NewRuntimeServiceClient(n.conn)
	n.images = runtimeapi.NewImageServiceClient(n.conn)
	for {
		v, err := n.runtime.Version(ctx, &runtimeapi.VersionRequest{})
		if err == nil {
			runc, _ := rt.Bin("runc")
			rv, _ := exec.Command(runc, "--version").Output()
			t.Logf("CRI %s: %s %s; %s", v.RuntimeApiVersion, v.RuntimeName, v.RuntimeVersion,
				strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(rv)), "\n", "; ")), " "))
			break
		}
		if ctx.Err() != nil || n.hasExited() {
			t.Fatalf("containerd did not answer on %s: %v\n%s", n.sock, err, n.logTail())
		}
		time.Sleep(200 * time.Millisecond)
	}

	archive, err := cluster.BuildPauseArchive(dir, pauseImage)
	if err != nil {
		t.Fatal(err)
	}
	out, err := n.ctr("images", "import", "--snapshotter", "overlayfs", archive)
	if err != nil {
		t.Fatalf("failed to import the pause image: %v\n%s", err, out)
	}
	for {
		st, err := n.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: pauseImage}})
		if err == nil && st.Image != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("CRI does not see the imported %s: %v", pauseImage, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return n
}

// ctr runs the runtime's ctr on the node's socket, namespace k8s.io (the
// CRI's), and returns its combined output.
func (n *node) ctr(args ...string) ([]byte, error) {
	bin, err := n.rt.Bin("ctr")
	if err != nil {
		return nil, err
	}
	return exec.Command(bin, append([]string{"-a", n.sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
}

// hasExited reports whether the containerd process has ended.
func (n *node) hasExited() bool {
	select {
	case <-n.exited:
		return true
	default:
		return false
	}
}

// logTail returns the end of containerd's log for failure messages.
func (n *node) logTail() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "containerd.log"))
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// stop removes every sandbox left (a failed test), stops containerd and
// its shims, and deletes the node's netns and temp dir.
func (n *node) stop(t *testing.T) {
	if n.shutdown {
		return
	}
	n.shutdown = true
	if n.runtime != nil && n.cmd != nil && !n.hasExited() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if l, err := n.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
			for _, s := range l.Items {
				t.Logf("cleanup: removing sandbox %s/%s", s.Metadata.Namespace, s.Metadata.Name)
				n.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id})
				n.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id})
			}
		}
		cancel()
	}
	if n.conn != nil {
		n.conn.Close()
	}
	if n.exited != nil && !n.hasExited() {
		n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(20 * time.Second):
			n.cmd.Process.Kill()
			<-n.exited
		}
	}
	// Shims daemonize away from containerd; end those of this node only,
	// by pid, recognised by our socket address on their command line.
	for _, pid := range cluster.ProcessesMentioning(n.sock) {
		t.Logf("cleanup: killing leftover shim %d", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	n.removeCgroups(t)
	for _, d := range n.shimDirs {
		os.Remove(d) // only if empty: another containerd may use it
	}
	if n.log != nil {
		n.log.Close()
	}
	testns.Release(n.netns)
	if t.Failed() {
		t.Logf("containerd log:\n%s", n.logTail())
		if os.Getenv("PODWIRE_E2E_KEEP") != "" {
			t.Logf("PODWIRE_E2E_KEEP set: keeping %s for inspection", n.dir)
			return
		}
	}
	// overlayfs/runc leftovers unmount with the mount namespace; remove the tree.
	if err := os.RemoveAll(n.dir); err != nil {
		t.Logf("failed to remove %s: %v", n.dir, err)
	}
}

// removeCgroups removes the run's cgroup parent, deepest first, in every
// mounted hierarchy; runc has removed the sandboxes' own cgroups.
func (n *node) removeCgroups(t *testing.T) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*" + n.cgroupParent)
	if _, err := os.Stat("/sys/fs/cgroup" + n.cgroupParent); err == nil {
		roots = append(roots, "/sys/fs/cgroup"+n.cgroupParent) // cgroup v2
	}
	for _, root := range roots {
		for _, dir := range cluster.CgroupTree(root) {
			if err := os.Remove(dir); err != nil {
				t.Errorf("failed to remove cgroup %s: %v", dir, err)
			}
		}
	}
}

// installCNI links the reference plugins into the node's bin dir and writes
// the conflist.
func (n *node) installCNI(t *testing.T, cniBin string, name string, conflist []byte) string {
	t.Helper()
	for _, p := range []string{"ptp", "host-local", "loopback", "tuning", "portmap", "bridge"} {
		dst := filepath.Join(n.binDir, p)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join(cniBin, p), dst); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(n.confDir, name)
	if err := os.WriteFile(path, conflist, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// sandboxConfig returns a pod's CRI sandbox config.
func (n *node) sandboxConfig(namespace, name string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	uid := fmt.Sprintf("%s-%s-uid", namespace, name)
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: uid, Attempt: 0},
		Hostname:     name,
		LogDirectory: filepath.Join(n.dir, "logs", uid),
		Labels:       map[string]string{"app": name},
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: n.cgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD},
			},
		},
	}
}
