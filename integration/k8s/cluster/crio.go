package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// crioConfig is a node's CRI-O config, for a node without systemd: every
// path of CRI-O's own under the node's directory ({{dir}}), the CNI dirs at
// the node's /etc/cni/net.d and /opt/cni/bin (crio runs in the node's
// mount namespace), cgroupfs under the kubelet's cgroupRoot, runc as the
// one runtime with the host's conmon as its monitor, and the pause image
// that Start pushed to the run's registry. What differs from CRI-O's
// defaults, and why:
//   - version_file and clean_shutdown_file persist across a restart of
//     crio within the run: a missing version file reads as a reboot, after
//     which crio removes every sandbox (CNI DEL) at start.
//   - cni_status_grace_period turns on CRI-O's STATUS polling after the
//     first success (every 5 s; off by default, when crio only polls until
//     the network is first ready): a failure then becomes NetworkReady=false
//     at the second failing poll.
//   - disable_hostport_mapping: else crio keeps nftables tables of its own
//     in the node netns for hostPorts, which no test uses.
//   - irqbalance_config_restore_file "disable": else crio writes
//     /etc/sysconfig/orig_irq_banned_cpus on the host.
//   - NRI off: its socket is a fixed host path, as with containerd.
//   - runtime_path is runc behind crioRuncWrapper, which does what
//     containerd's restrict_oom_score_adj does (the CRI suite's and the
//     suites' containerd set it): this host's root lacks CAP_SYS_RESOURCE,
//     so the -997 the kubelet asks for a node-critical pod (podwire's
//     agent) fails runc's write of oom_score_adj. CRI-O has no such
//     setting.
//
// drop_infra_ctr stays at its default (true): a sandbox has no pause
// process, its namespaces are pinned by pinns under /var/run (PodNetNS).
const crioConfig = `[crio]
root = "{{dir}}/crio-root"
runroot = "{{dir}}/crio-run"
storage_driver = "overlay"
log_dir = "/var/log/crio/pods"
version_file = "{{dir}}/crio-run/version"
clean_shutdown_file = "{{dir}}/crio-root/clean.shutdown"

[crio.api]
listen = "{{dir}}/crio.sock"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
selinux = false
log_level = "info"
hooks_dir = []
pinns_path = "{{pinns}}"
container_exits_dir = "{{dir}}/crio-run/exits"
container_attach_socket_dir = "{{dir}}/crio-run/attach"
irqbalance_config_restore_file = "disable"
irqbalance_config_file = "{{dir}}/crio-irqbalance"
disable_hostport_mapping = true

[crio.runtime.runtimes.runc]
runtime_path = "{{dir}}/crio-runc"
runtime_type = "oci"
runtime_root = "{{dir}}/crio-run/runc"
monitor_path = "{{conmon}}"
monitor_cgroup = "pod"
monitor_env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]

[crio.image]
pause_image = "{{pause}}"
signature_policy = "{{dir}}/crio-policy.json"
signature_policy_dir = "{{dir}}/crio-policies"
short_name_mode = "disabled"

[crio.network]
network_dir = "/etc/cni/net.d"
plugin_dirs = ["/opt/cni/bin"]
cni_status_grace_period = "1s"

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
`

// crioRegistries is the registries.conf of a CRI-O node: the run's
// registry (StartRegistry) over plain HTTP, and the images the suites name
// docker.io/podwire/... (PauseImage) pulled from it, stored under the name
// asked for (a prefix rewrite, as a mirror-less air-gapped node does).
const crioRegistries = `[[registry]]
prefix = "docker.io/podwire"
location = "{{registry}}/podwire"
insecure = true

[[registry]]
location = "{{registry}}"
insecure = true
`

// crioRuncWrapper runs runc ({{runc}}) with the bundle's
// process.oomScoreAdj raised to crio's own score when it asks for less:
// containerd's restrict_oom_score_adj, for a runtime without
// CAP_SYS_RESOURCE (crioConfig). CRI-O writes config.json indented
// (runtime-tools' generator), one "oomScoreAdj": N line.
const crioRuncWrapper = `#!/bin/sh
bundle= prev=
for a in "$@"; do
	case $prev in --bundle|-b) bundle=$a ;; esac
	case $a in --bundle=*) bundle=${a#--bundle=} ;; esac
	prev=$a
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
	own=$(cat /proc/self/oom_score_adj)
	adj=$(sed -n 's/.*"oomScoreAdj": *\(-\{0,1\}[0-9]*\).*/\1/p' "$bundle/config.json")
	if [ -n "$adj" ] && [ "$adj" -lt "$own" ]; then
		sed -i "s/\"oomScoreAdj\": *-\{0,1\}[0-9]*/\"oomScoreAdj\": $own/" "$bundle/config.json"
	fi
fi
exec {{runc}} "$@"
`

// crioSock is a CRI-O node's CRI socket.
func (n *Node) crioSock() string { return filepath.Join(n.Dir, "crio.sock") }

// startCRIO writes the node's CRI-O config, registries.conf, storage.conf
// and an accept-anything signature policy (the run's images are unsigned),
// starts crio and waits for its CRI. The registry must be running: crio
// pulls the pause image at the first sandbox.
func (n *Node) startCRIO(ctx context.Context) error {
	rt := n.c.opts.Runtime
	bins := map[string]string{}
	for _, b := range []string{"crio", "pinns", "runc", "conmon"} {
		p, err := rt.Bin(b)
		if err != nil {
			return err
		}
		bins[b] = p
	}
	r := strings.NewReplacer("{{dir}}", n.Dir, "{{pinns}}", bins["pinns"], "{{runc}}", bins["runc"],
		"{{conmon}}", bins["conmon"], "{{pause}}", PauseImage, "{{registry}}", RegistryHost)
	files := map[string]string{
		"crio.conf":            r.Replace(crioConfig),
		"crio-registries.conf": r.Replace(crioRegistries),
		"crio-storage.conf": r.Replace(`[storage]
driver = "overlay"
graphroot = "{{dir}}/crio-root"
runroot = "{{dir}}/crio-run"
`),
		"crio-policy.json": `{"default": [{"type": "insecureAcceptAnything"}]}` + "\n",
		"crio-runc":        r.Replace(crioRuncWrapper),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(n.Dir, name), []byte(content), 0o755); err != nil {
			return err
		}
	}
	for _, d := range []string{"crio-root", "crio-run", "crio-policies"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	return n.runCRIO(ctx)
}

// runCRIO starts crio with the node's config (startCRIO wrote it) and
// waits for its CRI. --config-dir "" keeps /etc/crio/crio.conf.d out; the
// environment names the node's storage.conf and registries.conf, which
// c/image and c/storage would otherwise read from /etc/containers.
func (n *Node) runCRIO(ctx context.Context) error {
	bin, err := n.c.opts.Runtime.Bin("crio")
	if err != nil {
		return err
	}
	env := append(os.Environ(), "CONTAINERS_STORAGE_CONF="+filepath.Join(n.Dir, "crio-storage.conf"),
		"CONTAINER_REGISTRIES_CONF="+filepath.Join(n.Dir, "crio-registries.conf"),
		"CONTAINER_REGISTRIES_CONF_DIR="+filepath.Join(n.Dir, "crio-registries.d"))
	p, err := n.c.runEnv(n, "crio", env, bin, "--config", filepath.Join(n.Dir, "crio.conf"), "--config-dir", "")
	if err != nil {
		return err
	}
	if n.criConn == nil {
		conn, err := grpc.NewClient("unix://"+n.CRISock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		n.cri, n.criConn = runtimeapi.NewRuntimeServiceClient(conn), conn
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return n.c.wait(ctx, "CRI-O's CRI on "+n.Name, p, 100*time.Millisecond, func() error {
		_, err := n.cri.Version(ctx, &runtimeapi.VersionRequest{})
		return err
	})
}

// RestartCRIO stops the node's crio with SIGTERM (its clean shutdown: the
// pods keep running under their conmons) and starts it again with the same
// config and state, as a package upgrade or `systemctl restart crio`
// does. At its start crio restores the sandboxes it finds, runs CNI CHECK
// on each, and calls the chain's GC with the restored ones as the valid
// attachments (with cniVersion 1.1.0 or later). It returns once the CRI
// answers again.
func (n *Node) RestartCRIO(ctx context.Context) error {
	p := n.c.proc(n, "crio")
	if p == nil || !n.c.opts.Runtime.IsCRIO() {
		return fmt.Errorf("%s runs no crio", n.Name)
	}
	if err := n.c.end(p); err != nil {
		return err
	}
	n.c.forget(p)
	return n.runCRIO(ctx)
}

// PullImage pulls ref through the node's CRI image service (from the run's
// registry: crioRegistries) and returns once the image is stored.
func (n *Node) PullImage(ctx context.Context, ref string) error {
	images := runtimeapi.NewImageServiceClient(n.criConn)
	if _, err := images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
		return fmt.Errorf("%s: CRI PullImage %s: %w", n.Name, ref, err)
	}
	return nil
}

// pullPause pushes the pause image to the run's registry and pulls it on
// every CRI-O node at once: CRI-O takes images from registries only.
func (c *Cluster) pullPause(ctx context.Context, dir string) error {
	img, err := BuildPauseImage(dir)
	if err != nil {
		return err
	}
	if _, err := c.Push(ctx, img, strings.TrimPrefix(PauseImage, "docker.io/")); err != nil {
		return fmt.Errorf("push of the pause image: %w", err)
	}
	errs := make(chan error, len(c.Nodes))
	for _, n := range c.Nodes {
		go func() { errs <- n.PullImage(ctx, PauseImage) }()
	}
	for range c.Nodes {
		err = errors.Join(err, <-errs)
	}
	return err
}

// startCRIO starts the registry (CRI-O pulls even the pause image from
// one), then crio on every node, and pulls the pause image on each.
func (c *Cluster) startCRIO(ctx context.Context, dir string) error {
	if err := c.StartRegistry(); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := n.startCRIO(ctx); err != nil {
			return err
		}
	}
	return c.pullPause(ctx, dir)
}

// crioNetNS is the network namespace of a CRI-O sandbox from its verbose
// status: the pause process's when the sandbox has one, else (CRI-O's
// default, drop_infra_ctr) the file pinns bound under the node's /var/run,
// which the host reaches through the holder's root.
func (n *Node) crioNetNS(info string) (string, error) {
	var st struct {
		Pid         int `json:"pid"`
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(info), &st); err != nil {
		return "", fmt.Errorf("CRI-O's verbose sandbox status: %w", err)
	}
	if st.Pid > 0 {
		return fmt.Sprintf("/proc/%d/ns/net", st.Pid), nil
	}
	for _, ns := range st.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" && ns.Path != "" {
			// An absolute symlink under /proc/PID/root resolves in the
			// caller's root, not the holder's: /var/run (a link to /run)
			// is resolved here.
			p := ns.Path
			if rest, ok := strings.CutPrefix(p, "/var/run/"); ok {
				p = "/run/" + rest
			}
			return fmt.Sprintf("/proc/%d/root%s", n.holder.Process.Pid, p), nil
		}
	}
	return "", fmt.Errorf("CRI-O's verbose sandbox status names no pid and no network namespace path")
}

// stopCRIOLeftovers kills the conmons of the node's CRI-O (they outlive
// crio; their command lines name the node's exits directory) and, when
// crio was killed, its pinned namespaces go with the holder's mount
// namespace.
func (n *Node) stopCRIOLeftovers() {
	for _, pid := range ProcessesMentioning(filepath.Join(n.Dir, "crio-run") + "/") {
		n.c.logf("cleanup: killing leftover conmon %d", pid)
		syscall.Kill(pid, syscall.SIGKILL)
		waitGone(pid, 5*time.Second)
	}
}

// crioLogTime matches the time of a line of crio's log (logrus's text
// format: time="2006-01-02T15:04:05.999999999Z07:00" level=... msg=...).
var crioLogTime = regexp.MustCompile(`^time="([^"]+)"`)

// LastLogLine returns the time of the last line of a daemon's log
// (LogTail's names; crio's, whose lines carry their time) that contains
// substr; an error when none does.
func (c *Cluster) LastLogLine(name, substr string) (time.Time, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "logs", name+".log"))
	if err != nil {
		return time.Time{}, err
	}
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if !strings.Contains(lines[i], substr) {
			continue
		}
		m := crioLogTime.FindStringSubmatch(lines[i])
		if m == nil {
			return time.Time{}, fmt.Errorf("%s's log line has no time: %q", name, lines[i])
		}
		return time.Parse(time.RFC3339Nano, m[1])
	}
	return time.Time{}, fmt.Errorf("no line of %s's log has %q", name, substr)
}
