package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const apiServer = "https://127.0.0.1:6443"

func (c *Cluster) k8sBin(name string) string { return filepath.Join(c.opts.K8sBinDir, name) }
func (c *Cluster) pki(name string) string    { return filepath.Join(c.Dir, "pki", name) }

// writePKI makes the CA, every component's certificate (a kubelet's per
// node), the service-account keys and the kubeconfigs. With a control
// plane run elsewhere (Options.ControlPlane) it signs with that control
// plane's CA instead and writes the nodes' and the admin's only.
func (c *Cluster) writePKI() error {
	var p *pki
	var err error
	if c.opts.ControlPlane == "" {
		if p, err = c.writeControlPlanePKI(); err != nil {
			return err
		}
	} else {
		if p, err = loadPKI(filepath.Join(c.opts.ControlPlane, "pki"), filepath.Join(c.Dir, "pki")); err != nil {
			return err
		}
		if err := p.issue("admin", "podwire-admin", []string{"system:masters"}, false, nil, nil); err != nil {
			return err
		}
		if err := p.kubeconfig(c.AdminKubeconfig, "admin", c.apiURL); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := p.issue("kubelet-"+n.Name, "system:node:"+n.Name, []string{"system:nodes"}, false, nil, nil); err != nil {
			return err
		}
		if err := p.kubeconfig(n.Kubeconfig, "kubelet-"+n.Name, c.APIServerURL()); err != nil {
			return err
		}
	}
	return nil
}

// writeControlPlanePKI makes the CA, the control plane's certificates (the
// apiserver's for c.cp's addresses), the service-account keys and the
// kubeconfigs of the admin, the controller-manager and the scheduler.
func (c *Cluster) writeControlPlanePKI() (*pki, error) {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return nil, err
	}
	serverIPs := []net.IP{net.ParseIP("127.0.0.1"), net.IP(c.cp.IP.AsSlice()), net.IP(ServiceCIDR.Addr().Next().AsSlice())}
	if c.opts.DualStack || c.opts.IPv6Only {
		serverIPs = append(serverIPs, net.IP(c.cp.IP6.AsSlice()), net.IP(ServiceCIDR6.Addr().Next().AsSlice()))
	}
	serverDNS := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	type cert struct {
		name, cn string
		orgs     []string
		server   bool
	}
	for _, cert := range []cert{
		{"apiserver", "kube-apiserver", nil, true},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false},
		{"admin", "podwire-admin", []string{"system:masters"}, false},
		{"controller-manager", "system:kube-controller-manager", nil, false},
		{"scheduler", "system:kube-scheduler", nil, false},
	} {
		if err := p.issue(cert.name, cert.cn, cert.orgs, cert.server, serverDNS, serverIPs); err != nil {
			return nil, err
		}
	}
	if err := p.serviceAccountKey(); err != nil {
		return nil, err
	}
	for name, path := range map[string]string{
		"admin":              c.AdminKubeconfig,
		"controller-manager": filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"scheduler":          filepath.Join(c.Dir, "scheduler.kubeconfig"),
	} {
		if err := p.kubeconfig(path, name, apiServer); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// APIServerURL is the apiserver as every node reaches it: the control
// plane's address on the uplinks' segment (the first node's, or that of a
// control plane run elsewhere), port 6443.
func (c *Cluster) APIServerURL() string {
	return "https://" + net.JoinHostPort(c.APIServerAddr().String(), "6443")
}

// APIServerAddr is the apiserver's address on the uplinks' segment, what
// a cluster without kube-proxy gives an agent as the kubernetes Service's
// endpoint.
func (c *Cluster) APIServerAddr() netip.Addr {
	if c.opts.ControlPlane != "" {
		return c.remoteIP
	}
	return c.cp.IP
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	p, err := c.run(c.cp, "etcd", c.opts.EtcdBin,
		"--name=default", "--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=default=http://127.0.0.1:2380",
		"--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: dialer(c.cp.NetNS)}, Timeout: 2 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.wait(ctx, "etcd /health", p, 100*time.Millisecond, func() error {
		return httpOK(hc, "http://127.0.0.1:2379/health")
	})
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	serviceCIDRs, advertise, bind := ServiceCIDR.String(), c.cp.IP, "0.0.0.0"
	switch {
	case c.opts.IPv6Only:
		// Both families: the components' kubeconfigs name 127.0.0.1.
		serviceCIDRs, advertise, bind = ServiceCIDR6.String(), c.cp.IP6, "::"
	case c.opts.DualStack:
		serviceCIDRs += "," + ServiceCIDR6.String()
	}
	policy := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return err
	}
	p, err := c.run(c.cp, "kube-apiserver", c.k8sBin("kube-apiserver"),
		"--audit-policy-file="+policy, "--audit-log-path="+c.AuditLog(), "--audit-log-format=json",
		"--advertise-address="+advertise.String(), "--bind-address="+bind, "--secure-port=6443",
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
		"--service-cluster-ip-range="+serviceCIDRs, "--allow-privileged=true",
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
		return httpOK(c.api, c.apiURL+"/readyz")
	})
}

// auditPolicy has the apiserver log, at the Metadata level, every request
// of the service accounts of the namespaces that add-ons run in (podwire's
// agent among them), once each: when the response is complete (a watch:
// when it ends). Nothing else is logged.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts:podwire-system"]
- level: None
`

// AuditLog is the apiserver's audit log (JSON lines, audit.k8s.io/v1
// Event): every request of podwire-system's service accounts.
func (c *Cluster) AuditLog() string { return filepath.Join(c.Dir, "logs", "audit.log") }

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
		DialContext:     dialer(c.cp.NetNS),
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

// API sends one request to the apiserver as the admin (from the first
// node's netns): method, a path such as /api/v1/namespaces/default/pods,
// and a JSON body (nil for none; a PATCH's is a JSON merge patch, RFC
// 7396). It returns the response body; a status
// outside 2xx is an error carrying it. Cheaper than Kubectl (no process,
// no TLS handshake per call) where a test makes many calls.
func (c *Cluster) API(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.apiURL+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		if method == http.MethodPatch {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
	}
	resp, err := c.api.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return b, fmt.Errorf("%s %s: %s: %.300s", method, path, resp.Status, b)
	}
	return b, nil
}

func (c *Cluster) startControllers() error {
	args := []string{
		"--kubeconfig=" + filepath.Join(c.Dir, "controller-manager.kubeconfig"),
		"--use-service-account-credentials", "--service-account-private-key-file=" + c.pki("sa.key"),
		"--root-ca-file=" + c.pki("ca.crt"),
		"--cluster-signing-cert-file=" + c.pki("ca.crt"), "--cluster-signing-key-file=" + c.pki("ca.key"),
		"--leader-elect=false", "--bind-address=127.0.0.1",
		// Without it, it creates /usr/libexec/kubernetes on the host.
		"--flex-volume-plugin-dir=" + filepath.Join(c.Dir, "flex"),
		"--cert-dir=" + filepath.Join(c.Dir, "controller-manager-certs"),
	}
	if c.opts.Primary == PrimaryNone {
		// Each node's spec.podCIDRs, as kubeadm's --pod-network-cidr sets
		// it up for flannel's kube subnet manager.
		clusterCIDRs, serviceCIDRs := ClusterCIDR.String(), ServiceCIDR.String()
		if c.opts.DualStack {
			clusterCIDRs += "," + ClusterCIDR6.String()
			serviceCIDRs += "," + ServiceCIDR6.String()
		}
		// The per-family mask sizes are refused on a single-stack
		// cluster, which takes --node-cidr-mask-size.
		masks := []string{"--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6=64"}
		if !c.opts.DualStack {
			masks = []string{"--node-cidr-mask-size=24"}
		}
		args = append(append(args, "--allocate-node-cidrs", "--cluster-cidr="+clusterCIDRs,
			"--service-cluster-ip-range="+serviceCIDRs, "--configure-cloud-routes=false"), masks...)
	}
	if _, err := c.run(c.cp, "kube-controller-manager", c.k8sBin("kube-controller-manager"), args...); err != nil {
		return err
	}
	_, err := c.run(c.cp, "kube-scheduler", c.k8sBin("kube-scheduler"),
		"--kubeconfig="+filepath.Join(c.Dir, "scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address=127.0.0.1")
	return err
}

// NodeStatus is what the tests read of a Node object.
type NodeStatus struct {
	Ready bool
	// ReadyReason and ReadyMessage are the Ready condition's reason and
	// message (the kubelet's, e.g. "KubeletNotReady" and "container
	// runtime network not ready: NetworkReady=false ...").
	ReadyReason, ReadyMessage string
	Taints                    []string
	Annotations               map[string]string
	// PodCIDRs is spec.podCIDRs (allocated with PrimaryNone).
	PodCIDRs []netip.Prefix
}

// Status reads the node's Node object through the API.
func (n *Node) Status() (*NodeStatus, error) {
	resp, err := n.c.api.Get(n.c.apiURL + "/api/v1/nodes/" + n.Name)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET node %s: %s", n.Name, resp.Status)
	}
	var obj struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			Taints   []struct{ Key, Effect string } `json:"taints"`
			PodCIDRs []string                       `json:"podCIDRs"`
		} `json:"spec"`
		Status struct {
			Conditions []struct{ Type, Status, Reason, Message string } `json:"conditions"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&obj); err != nil {
		return nil, err
	}
	s := &NodeStatus{Annotations: obj.Metadata.Annotations}
	for _, p := range obj.Spec.PodCIDRs {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			return nil, fmt.Errorf("node %s: podCIDR %q: %w", n.Name, p, err)
		}
		s.PodCIDRs = append(s.PodCIDRs, pfx)
	}
	for _, cond := range obj.Status.Conditions {
		if cond.Type == "Ready" {
			s.Ready, s.ReadyReason, s.ReadyMessage = cond.Status == "True", cond.Reason, cond.Message
		}
	}
	for _, t := range obj.Spec.Taints {
		s.Taints = append(s.Taints, t.Key+":"+t.Effect)
	}
	return s, nil
}

// WaitNodesReady waits until every node is Ready without taints but
// Options.RegisterTaints (with PrimaryNone: once the caller's pod network
// is installed), and then logs "N nodes Ready".
func (c *Cluster) WaitNodesReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 180*time.Second)
	defer cancel()
	registered := map[string]bool{}
	for _, t := range c.opts.RegisterTaints {
		key, rest, _ := strings.Cut(t, "=")
		_, effect, _ := strings.Cut(rest, ":")
		registered[key+":"+effect] = true
	}
	for _, n := range c.Nodes {
		if err := c.wait(ctx, n.Name+" Ready without taints", c.proc(n, "kubelet"), 250*time.Millisecond, func() error {
			s, err := n.Status()
			if err != nil {
				return err
			}
			others := slices.DeleteFunc(slices.Clone(s.Taints), func(t string) bool { return registered[t] })
			if !s.Ready || len(others) > 0 {
				return fmt.Errorf("node %s: ready %v, taints %v", n.Name, s.Ready, s.Taints)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	c.logf("%d nodes Ready", len(c.Nodes))
	return nil
}

// waitNodesRegistered waits until every node's Node object exists (with
// its podCIDRs allocated, with PrimaryNone).
func (c *Cluster) waitNodesRegistered(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		if err := c.wait(ctx, n.Name+" registered", c.proc(n, "kubelet"), 250*time.Millisecond, func() error {
			s, err := n.Status()
			if err == nil && c.opts.Primary == PrimaryNone && len(s.PodCIDRs) == 0 {
				return fmt.Errorf("node %s has no podCIDRs yet", n.Name)
			}
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// WaitServiceAccount waits for the default ServiceAccount of namespace
// (made by the controller-manager): pods are refused without it.
func (c *Cluster) WaitServiceAccount(ctx context.Context, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return c.wait(ctx, "ServiceAccount "+namespace+"/default", c.proc(c.cp, "kube-controller-manager"), 200*time.Millisecond, func() error {
		return httpOK(c.api, c.apiURL+"/api/v1/namespaces/"+namespace+"/serviceaccounts/default")
	})
}

// Kubectl runs the cluster's kubectl as the admin, inside the first node's netns,
// with stdin (may be empty); it returns stdout, and an error carrying
// stderr.
func (c *Cluster) Kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	return c.KubectlAs(ctx, c.AdminKubeconfig, c.adminCache(), stdin, args...)
}

// KubectlAs is Kubectl as the user of kubeconfig, whose discovery cache
// is cacheDir (a user's own, apart from the admin's).
func (c *Cluster) KubectlAs(ctx context.Context, kubeconfig, cacheDir, stdin string, args ...string) (string, error) {
	cmd := c.kubectlCommand(ctx, kubeconfig, cacheDir, args)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// KubectlCommand is the cluster's kubectl with args, as Kubectl runs it,
// for the caller to start (a long-running `logs -f`, say).
func (c *Cluster) KubectlCommand(ctx context.Context, args ...string) *exec.Cmd {
	return c.kubectlCommand(ctx, c.AdminKubeconfig, c.adminCache(), args)
}

func (c *Cluster) kubectlCommand(ctx context.Context, kubeconfig, cacheDir string, args []string) *exec.Cmd {
	argv := append([]string{"--net=" + c.Nodes[0].NetNS, "--", c.k8sBin("kubectl"),
		"--kubeconfig=" + kubeconfig, "--cache-dir=" + cacheDir}, args...)
	return exec.CommandContext(ctx, "nsenter", argv...)
}

func (c *Cluster) adminCache() string { return filepath.Join(c.Dir, "kubectl-cache") }

// Helm runs the helm CLI bin as the admin, inside the first node's netns
// as Kubectl does, with its cache, config and data under the run's
// directory (never the host's ~/.cache/helm); it returns the combined
// output, and an error carrying it.
func (c *Cluster) Helm(ctx context.Context, bin string, args ...string) (string, error) {
	argv := append([]string{"--net=" + c.Nodes[0].NetNS, "--", bin, "--kubeconfig=" + c.AdminKubeconfig}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	home := filepath.Join(c.Dir, "helm")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config",
		"HELM_DATA_HOME="+home+"/data")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Versions returns one line per component, as each binary reports itself,
// then the runtime as each node's containerd answers the CRI Version call
// (name and version of the daemon that runs), and its runc.
func (c *Cluster) Versions(ctx context.Context) []string {
	var lines []string
	ask := func(name string, argv ...string) {
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		v := strings.Join(strings.Fields(strings.SplitN(strings.TrimSpace(string(out)), "\n", 3)[0]), " ")
		if name == "etcd" || name == "kubectl" || name == "runc" {
			v = strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "; ")), " ")
		}
		if err != nil {
			v = fmt.Sprintf("%s (error: %v)", v, err)
		}
		lines = append(lines, fmt.Sprintf("%-24s %s", name, v))
	}
	ask("etcd", c.opts.EtcdBin, "--version")
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"} {
		if _, err := os.Stat(c.k8sBin(b)); err == nil {
			ask(b, c.k8sBin(b), "--version")
		}
	}
	ask("kubectl", c.k8sBin("kubectl"), "version", "--client")
	for _, n := range c.Nodes {
		lines = append(lines, fmt.Sprintf("%-24s %s", "runtime "+n.Name, n.RuntimeVersion(ctx)))
	}
	if runc, err := c.opts.Runtime.Bin("runc"); err != nil {
		lines = append(lines, fmt.Sprintf("%-24s (error: %v)", "runc", err))
	} else {
		ask("runc", runc, "--version")
	}
	if c.opts.Runtime.IsCRIO() {
		if conmon, err := c.opts.Runtime.Bin("conmon"); err != nil {
			lines = append(lines, fmt.Sprintf("%-24s (error: %v)", "conmon", err))
		} else {
			ask("conmon", conmon, "--version")
		}
	}
	return lines
}

// RuntimeVersion is what the node's runtime answers to the CRI Version
// call: "containerd v2.3.7 (CRI v1)", or the error.
func (n *Node) RuntimeVersion(ctx context.Context) string {
	v, err := n.cri.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return fmt.Sprintf("(error: %v)", err)
	}
	return fmt.Sprintf("%s %s (CRI %s)", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
}
