package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const apiServer = "https://127.0.0.1:6443"

func (c *Cluster) k8sBin(name string) string { return filepath.Join(c.opts.K8sBinDir, name) }
func (c *Cluster) pki(name string) string    { return filepath.Join(c.Dir, "pki", name) }

// writePKI makes the CA, every component's certificate, the
// service-account keys and the kubeconfigs.
func (c *Cluster) writePKI() error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	serverIPs := []net.IP{net.ParseIP("127.0.0.1"), net.IP(NodeIP.AsSlice()), net.ParseIP("10.96.0.1")}
	serverDNS := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	certs := []struct {
		name, cn string
		orgs     []string
		server   bool
	}{
		{"apiserver", "kube-apiserver", nil, true},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false},
		{"admin", "podwire-admin", []string{"system:masters"}, false},
		{"controller-manager", "system:kube-controller-manager", nil, false},
		{"scheduler", "system:kube-scheduler", nil, false},
		{"kubelet", "system:node:" + NodeName, []string{"system:nodes"}, false},
	}
	for _, cert := range certs {
		if err := p.issue(cert.name, cert.cn, cert.orgs, cert.server, serverDNS, serverIPs); err != nil {
			return err
		}
	}
	if err := p.serviceAccountKey(); err != nil {
		return err
	}
	for name, path := range map[string]string{
		"admin": c.AdminKubeconfig, "kubelet": c.KubeletKubeconfig,
		"controller-manager": filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"scheduler":          filepath.Join(c.Dir, "scheduler.kubeconfig"),
	} {
		if err := p.kubeconfig(path, name, apiServer); err != nil {
			return err
		}
	}
	return nil
}

// writeCNI links the reference plugins into the node's bin dir and writes
// the primary conflist as stock installers do (flannel's, Calico's and
// Cilium's still write cniVersion 0.3.1).
func (c *Cluster) writeCNI() error {
	for _, p := range []string{"ptp", "host-local", "loopback"} {
		if err := os.Symlink(filepath.Join(c.opts.CNIBinDir, p), filepath.Join(c.CNIBinDir, p)); err != nil {
			return err
		}
	}
	c.PrimaryConflist = filepath.Join(c.CNIConfDir, "10-ptp.conflist")
	return os.WriteFile(c.PrimaryConflist, c.PrimaryConflistBytes(), 0o644)
}

// PrimaryConflistBytes is the primary's conflist as its installer writes
// it (without podwire): what a flannel-style installer puts back on restart.
func (c *Cluster) PrimaryConflistBytes() []byte {
	return []byte(fmt.Sprintf(`{
  "cniVersion": "0.3.1",
  "name": "k8s-pod-network",
  "plugins": [
    {
      "type": "ptp",
      "mtu": 1500,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    }
  ]
}
`, PodCIDR, PodCIDR.Addr().Next(), filepath.Join(c.Dir, "ipam")))
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	p, err := c.run("etcd", c.opts.EtcdBin,
		"--name=default", "--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=default=http://127.0.0.1:2380",
		"--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: dialer(c.NodeNetNS)}, Timeout: 2 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.wait(ctx, "etcd /health", p, 100*time.Millisecond, func() error {
		return httpOK(hc, "http://127.0.0.1:2379/health")
	})
}

// containerdConfig is containerd 1.6's config (version 2), shared with the
// CRI suite (integration/cri) through ContainerdConfig: restrict_oom_score_adj because root here lacks CAP_SYS_RESOURCE;
// the streaming server on the node's loopback; CNI dirs of the run;
// max_conf_num 1 (the first conflist is the network, as with a kubelet);
// registry hosts from {{dir}}/certs.d (one hosts.toml per registry, read at
// each pull: StartRegistry adds the run's plain-HTTP registry there).
const containerdConfig = `version = 2
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
`

// ContainerdConfig returns the config of a containerd whose root, state,
// sockets, runc root and CNI dirs are all under dir, running runc (a path)
// with sandbox image pause.
func ContainerdConfig(dir, runc, pause string) string {
	return strings.NewReplacer("{{dir}}", dir, "{{runc}}", runc, "{{pause}}", pause).Replace(containerdConfig)
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	runc, _ := exec.LookPath("runc")
	cfg := ContainerdConfig(c.Dir, runc, PauseImage)
	path := filepath.Join(c.Dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	p, err := c.run("containerd", "containerd", "--config", path)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+c.ContainerdSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	c.cri = runtimeapi.NewRuntimeServiceClient(conn)
	c.images = runtimeapi.NewImageServiceClient(conn)
	c.criConn = conn
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.wait(ctx, "containerd's CRI", p, 100*time.Millisecond, func() error {
		_, err := c.cri.Version(ctx, &runtimeapi.VersionRequest{})
		return err
	})
}

// ImportImage imports an OCI archive (WriteImageArchive) into containerd's
// k8s.io namespace and waits until the CRI sees the image named ref in it.
// Pods use it with imagePullPolicy: Never.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	out, err := exec.CommandContext(ctx, "ctr", "-a", c.ContainerdSock, "-n", "k8s.io", "images", "import",
		"--snapshotter", "overlayfs", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("failed to import %s: %v\n%s", archive, err, out)
	}
	return nil
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	p, err := c.run("kube-apiserver", c.k8sBin("kube-apiserver"),
		"--advertise-address="+NodeIP.String(), "--bind-address=0.0.0.0", "--secure-port=6443",
		"--etcd-servers=http://127.0.0.1:2379",
		"--client-ca-file="+c.pki("ca.crt"),
		"--tls-cert-file="+c.pki("apiserver.crt"), "--tls-private-key-file="+c.pki("apiserver.key"),
		"--kubelet-client-certificate="+c.pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+c.pki("apiserver-kubelet-client.key"),
		// Without it, logs and exec resolve the node's name over DNS.
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+c.pki("sa.pub"),
		"--service-account-signing-key-file="+c.pki("sa.key"),
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--service-cluster-ip-range="+ServiceCIDR.String(), "--allow-privileged=true",
		"--cert-dir="+filepath.Join(c.Dir, "apiserver-certs"), "--profiling=false")
	if err != nil {
		return err
	}
	if c.api, err = c.apiClient(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	return c.wait(ctx, "kube-apiserver /readyz", p, 250*time.Millisecond, func() error {
		return httpOK(c.api, apiServer+"/readyz")
	})
}

// apiClient is an HTTPS client of the apiserver with the admin certificate,
// dialing inside the node netns.
func (c *Cluster) apiClient() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(c.pki("admin.crt"), c.pki("admin.key"))
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(c.pki("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext:     dialer(c.NodeNetNS),
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool},
	}}, nil
}

func httpOK(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %.300s", url, resp.Status, b)
	}
	return nil
}

func (c *Cluster) startControllers() error {
	if _, err := c.run("kube-controller-manager", c.k8sBin("kube-controller-manager"),
		"--kubeconfig="+filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"--use-service-account-credentials", "--service-account-private-key-file="+c.pki("sa.key"),
		"--root-ca-file="+c.pki("ca.crt"),
		"--cluster-signing-cert-file="+c.pki("ca.crt"), "--cluster-signing-key-file="+c.pki("ca.key"),
		"--leader-elect=false", "--bind-address=127.0.0.1",
		// Without it, it creates /usr/libexec/kubernetes on the host.
		"--flex-volume-plugin-dir="+filepath.Join(c.Dir, "flex"),
		"--cert-dir="+filepath.Join(c.Dir, "controller-manager-certs")); err != nil {
		return err
	}
	_, err := c.run("kube-scheduler", c.k8sBin("kube-scheduler"),
		"--kubeconfig="+filepath.Join(c.Dir, "scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address=127.0.0.1")
	return err
}

// kubeletConfig: cgroupfs and failCgroupV1 false (this host is hybrid
// cgroup v1; containerd 1.6 does not implement RuntimeConfig, so the driver
// is set here); oomScoreAdj 0 (root lacks CAP_SYS_RESOURCE);
// protectKernelDefaults with the fake /proc/sys files of the holder;
// eviction and image GC thresholds out of the way of a shared disk.
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
containerRuntimeEndpoint: unix://{{dir}}/containerd.sock
volumePluginDir: {{dir}}/volume-plugins
podLogsDir: /var/log/pods
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
`

func (c *Cluster) startKubelet() error {
	cfg := strings.NewReplacer("{{ca}}", c.pki("ca.crt"), "{{cgroupRoot}}", c.cgroupRoot, "{{dir}}", c.Dir).Replace(kubeletConfig)
	path := filepath.Join(c.Dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	_, err := c.run("kubelet", c.k8sBin("kubelet"), "--config="+path, "--kubeconfig="+c.KubeletKubeconfig,
		"--hostname-override="+NodeName, "--node-ip="+NodeIP.String())
	return err
}

// NodeStatus is what the tests read of the Node object.
type NodeStatus struct {
	Ready       bool
	Taints      []string
	Annotations map[string]string
}

// Node reads the Node object through the API.
func (c *Cluster) Node() (*NodeStatus, error) {
	resp, err := c.api.Get(apiServer + "/api/v1/nodes/" + NodeName)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET node %s: %s", NodeName, resp.Status)
	}
	var n struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			Taints []struct{ Key, Effect string } `json:"taints"`
		} `json:"spec"`
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		return nil, err
	}
	s := &NodeStatus{Annotations: n.Metadata.Annotations}
	for _, cond := range n.Status.Conditions {
		if cond.Type == "Ready" {
			s.Ready = cond.Status == "True"
		}
	}
	for _, t := range n.Spec.Taints {
		s.Taints = append(s.Taints, t.Key+":"+t.Effect)
	}
	return s, nil
}

func (c *Cluster) waitNodeSchedulable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	return c.wait(ctx, "node Ready without taints", c.proc("kubelet"), 250*time.Millisecond, func() error {
		n, err := c.Node()
		if err != nil {
			return err
		}
		if !n.Ready || len(n.Taints) > 0 {
			return fmt.Errorf("node %s: ready %v, taints %v", NodeName, n.Ready, n.Taints)
		}
		return nil
	})
}

// WaitServiceAccount waits for the default ServiceAccount of namespace
// (made by the controller-manager): pods are refused without it.
func (c *Cluster) WaitServiceAccount(ctx context.Context, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return c.wait(ctx, "ServiceAccount "+namespace+"/default", c.proc("kube-controller-manager"), 200*time.Millisecond, func() error {
		return httpOK(c.api, apiServer+"/api/v1/namespaces/"+namespace+"/serviceaccounts/default")
	})
}

// Kubectl runs the cluster's kubectl as the admin, inside the node netns,
// with stdin (may be empty); it returns stdout, and an error carrying
// stderr.
func (c *Cluster) Kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	argv := append([]string{"--net=" + c.NodeNetNS, "--", c.k8sBin("kubectl"),
		"--kubeconfig=" + c.AdminKubeconfig, "--cache-dir=" + filepath.Join(c.Dir, "kubectl-cache")}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// Versions returns one line per component, as each binary reports itself.
func (c *Cluster) Versions(ctx context.Context) []string {
	var lines []string
	ask := func(name string, argv ...string) {
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		v := strings.Join(strings.Fields(strings.SplitN(strings.TrimSpace(string(out)), "\n", 3)[0]), " ")
		if name == "etcd" || name == "kubectl" {
			v = strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "; ")), " ")
		}
		if err != nil {
			v = fmt.Sprintf("%s (error: %v)", v, err)
		}
		lines = append(lines, fmt.Sprintf("%-24s %s", name, v))
	}
	ask("etcd", c.opts.EtcdBin, "--version")
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"} {
		ask(b, c.k8sBin(b), "--version")
	}
	ask("kubectl", c.k8sBin("kubectl"), "version", "--client")
	ask("containerd", "containerd", "--version")
	ask("runc", "runc", "--version")
	return lines
}

// removeAllSandboxes stops and removes every pod sandbox through the CRI
// (containerd runs the CNI DELs), as the kubelet would have.
func (c *Cluster) removeAllSandboxes(ctx context.Context) error {
	l, err := c.cri.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	for _, s := range l.Items {
		c.logf("cleanup: removing sandbox %s/%s", s.Metadata.Namespace, s.Metadata.Name)
		c.cri.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id})
		c.cri.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id})
	}
	return nil
}

// Sandboxes lists the CRI sandboxes of the pod with uid (any state).
func (c *Cluster) Sandboxes(ctx context.Context, uid string) ([]*runtimeapi.PodSandbox, error) {
	l, err := c.cri.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// PodNetNS returns /proc/PID/ns/net of the ready sandbox of the pod with
// uid (its pause process), and the sandbox's ID (= CNI_CONTAINERID).
func (c *Cluster) PodNetNS(ctx context.Context, uid string) (path, sandboxID string, err error) {
	items, err := c.Sandboxes(ctx, uid)
	if err != nil {
		return "", "", err
	}
	for _, s := range items {
		if s.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		st, err := c.cri.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: s.Id, Verbose: true})
		if err != nil {
			return "", "", err
		}
		var info struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid == 0 {
			return "", "", fmt.Errorf("no pid in the verbose status of sandbox %s: %v", s.Id, err)
		}
		return fmt.Sprintf("/proc/%d/ns/net", info.Pid), s.Id, nil
	}
	return "", "", fmt.Errorf("no ready sandbox for pod uid %s", uid)
}

// CNIConfig returns the CNI configuration containerd has loaded, as its
// verbose CRI status reports it (JSON with each network's source).
func (c *Cluster) CNIConfig(ctx context.Context) (string, error) {
	st, err := c.cri.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return "", err
	}
	conf, ok := st.Info["cniconfig"]
	if !ok {
		return "", fmt.Errorf("containerd's verbose status has no cniconfig")
	}
	return conf, nil
}
