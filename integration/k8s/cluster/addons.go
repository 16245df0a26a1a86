package cluster

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"
)

// The add-ons' manifests, as their projects ship them, with the run's
// values in double braces (each file's header lists its changes).
//
//go:embed addons/kube-flannel.yml addons/kube-proxy.yaml addons/coredns.yaml addons/multus-daemonset-thick.yml addons/calico.yaml
var addons embed.FS

// renderAddon reads addons/name and replaces each {{KEY}} with vals[KEY];
// a placeholder left unreplaced is an error.
func renderAddon(name string, vals map[string]string) (string, error) {
	b, err := addons.ReadFile("addons/" + name)
	if err != nil {
		return "", err
	}
	s := string(b)
	for k, v := range vals {
		s = strings.ReplaceAll(s, "{{"+k+"}}", v)
	}
	if i := strings.Index(s, "{{"); i >= 0 {
		return "", fmt.Errorf("addons/%s: %.40q is not replaced", name, s[i:])
	}
	return s, nil
}

// clusterCIDRs is the controller-manager's --cluster-cidr value.
func (c *Cluster) clusterCIDRs() string {
	if c.opts.DualStack {
		return ClusterCIDR.String() + "," + ClusterCIDR6.String()
	}
	return ClusterCIDR.String()
}

// InstallKubeProxy applies kube-proxy as kubeadm deploys it (a DaemonSet,
// kube-system/kube-proxy) in nftables mode, running image with the
// kube-proxy binary at bin inside it, and waits until it runs on every
// node.
func (c *Cluster) InstallKubeProxy(ctx context.Context, image, bin string) error {
	m, err := renderAddon("kube-proxy.yaml", map[string]string{
		"APISERVER": c.APIServerURL(), "CLUSTER_CIDRS": c.clusterCIDRs(),
		"KUBE_PROXY_IMAGE": image, "KUBE_PROXY_BIN": bin,
	})
	if err != nil {
		return err
	}
	return c.applyAndRollOut(ctx, m, "kube-system", "ds/kube-proxy")
}

// InstallFlannel applies flannel's own manifest (kube subnet manager,
// vxlan, nftables, dual-stack when the cluster is) with image, and waits
// until flannel runs on every node and every node is Ready (its conflist
// written, so containerd's network is ready).
func (c *Cluster) InstallFlannel(ctx context.Context, image string) error {
	if c.opts.Primary != PrimaryNone {
		return fmt.Errorf("flannel needs Primary %q (podCIDRs allocated, no conflist of Start's)", PrimaryNone)
	}
	// The primary starts before anything that waits for the node's
	// registration taints to go (podwire's startup taint, NoExecute), so
	// it tolerates them, as an operator's primary must.
	var tolerations []string
	for _, t := range c.opts.RegisterTaints {
		key, rest, _ := strings.Cut(t, "=")
		_, effect, _ := strings.Cut(rest, ":")
		tolerations = append(tolerations, fmt.Sprintf("      - {key: %q, operator: Exists, effect: %s}", key, effect))
	}
	m, err := renderAddon("kube-flannel.yml", map[string]string{
		"FLANNEL_IMAGE": image, "CLUSTER_CIDR": ClusterCIDR.String(), "CLUSTER_CIDR6": ClusterCIDR6.String(),
		"REGISTER_TOLERATIONS": strings.Join(tolerations, "\n"),
	})
	if err != nil {
		return err
	}
	if !c.opts.DualStack {
		m = strings.Replace(m, `"EnableIPv6": true`, `"EnableIPv6": false`, 1)
	}
	if err := c.applyAndRollOut(ctx, m, "kube-flannel", "ds/kube-flannel-ds"); err != nil {
		return err
	}
	return c.WaitNodesReady(ctx)
}

// Calico is a Calico installation (InstallCalico).
type Calico struct {
	// NodeImage and CNIImage are calico/node's and calico/cni's images
	// (CalicoNodeImage, CalicoCNIImage, pushed to the run's registry).
	NodeImage, CNIImage string
	// Felix is the spec of FelixConfiguration "default", which
	// InstallCalico creates before calico-node starts, as an operator
	// does (calico-node's start-up then only fills in what is missing);
	// nil leaves it to the start-up.
	Felix map[string]any
}

// calicoTablesRefresh is Felix's resync of its own tables
// (FELIX_NFTABLESREFRESHINTERVAL, whole seconds), far shorter than its
// default, so that a suite sees Felix repair its drift within a test.
const calicoTablesRefresh = "5"

// InstallCalico applies Calico's own manifest (addons/calico.yaml:
// Kubernetes API datastore, VXLAN, Felix in nftables mode, the run's
// cluster CIDRs as its IP pools, dual-stack when the cluster is) with cal's
// images: everything but the calico-node DaemonSet, then, once Calico's
// CRDs are established, cal.Felix, then the DaemonSet; it waits until
// calico-node runs on every node and every node is Ready (install-cni
// wrote 10-calico.conflist, so the runtime's network is ready).
func (c *Cluster) InstallCalico(ctx context.Context, cal Calico) error {
	if c.opts.Primary != PrimaryNone || !c.opts.Calico {
		return fmt.Errorf("Calico needs Primary %q and Options.Calico (a /var/lib/calico per node)", PrimaryNone)
	}
	vals := map[string]string{
		"CALICO_NODE_IMAGE": cal.NodeImage, "CALICO_CNI_IMAGE": cal.CNIImage, "NFTABLES_REFRESH": calicoTablesRefresh,
		"CLUSTER_CIDR": ClusterCIDR.String(), "CLUSTER_CIDR6": ClusterCIDR6.String(),
		"ASSIGN_IPV6": "false", "FELIX_IPV6SUPPORT": "false", "IP6": "none",
	}
	if c.opts.DualStack {
		vals["ASSIGN_IPV6"], vals["FELIX_IPV6SUPPORT"], vals["IP6"] = "true", "true", "autodetect"
	}
	m, err := renderAddon("calico.yaml", vals)
	if err != nil {
		return err
	}
	const dsHead = "# Source: calico/templates/calico-node.yaml\n# This manifest installs the calico-node container"
	i := strings.Index(m, dsHead)
	if i < 0 {
		return fmt.Errorf("addons/calico.yaml: no calico-node DaemonSet")
	}
	start := time.Now()
	// Server-side: the largest CRDs exceed the annotation client-side
	// apply keeps (Calico's install docs say the same).
	if out, err := c.Kubectl(ctx, m[:i], "apply", "--server-side", "-f", "-"); err != nil {
		return fmt.Errorf("kubectl apply of Calico's CRDs and RBAC: %v\n%s", err, out)
	}
	if out, err := c.Kubectl(ctx, "", "wait", "--for=condition=Established", "--timeout=60s",
		"crd/felixconfigurations.crd.projectcalico.org"); err != nil {
		return fmt.Errorf("Calico's CRDs: %v\n%s", err, out)
	}
	if cal.Felix != nil {
		fc, err := json.Marshal(map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "FelixConfiguration",
			"metadata": map[string]any{"name": "default"}, "spec": cal.Felix})
		if err != nil {
			return err
		}
		if out, err := c.Kubectl(ctx, string(fc), "apply", "-f", "-"); err != nil {
			return fmt.Errorf("FelixConfiguration default: %v\n%s", err, out)
		}
	}
	c.logf("%-28s %6.1fs", "Calico's CRDs established", time.Since(start).Seconds())
	if err := c.applyAndRollOut(ctx, m[i:], "kube-system", "ds/calico-node"); err != nil {
		return err
	}
	return c.WaitNodesReady(ctx)
}

// InstallCoreDNS applies CoreDNS as kubeadm deploys it (kube-system's
// coredns Deployment of two replicas and the kube-dns Service at
// ClusterDNS, whose first address the kubelets give pods as their
// nameserver),
// running image, and waits until both replicas are Ready.
func (c *Cluster) InstallCoreDNS(ctx context.Context, image string) error {
	policy, ips := "SingleStack", []string{}
	for _, a := range c.ClusterDNS() {
		ips = append(ips, fmt.Sprintf("%q", a))
	}
	if len(ips) > 1 {
		policy = "RequireDualStack"
	}
	m, err := renderAddon("coredns.yaml", map[string]string{
		"COREDNS_IMAGE": image, "IP_FAMILY_POLICY": policy, "CLUSTER_IP": ips[0], "CLUSTER_DNS": "[" + strings.Join(ips, ", ") + "]",
	})
	if err != nil {
		return err
	}
	return c.applyAndRollOut(ctx, m, "kube-system", "deploy/coredns")
}

// MultusDaemonConfig is Multus thick's own daemon configuration (its
// deployments/multus-daemonset-thick.yml): the configuration it writes
// into the conf dir (00-multus.conf) is generated from the node's first
// conflist ("multusConfigFile": "auto"), whose path becomes its
// clusterNetwork, and the delegates run chrooted into the node's root.
var MultusDaemonConfig = map[string]any{
	"chrootDir": "/hostroot", "cniVersion": "0.3.1", "logLevel": "verbose", "logToStderr": true,
	"cniConfigDir": "/host/etc/cni/net.d", "multusAutoconfigDir": "/host/etc/cni/net.d",
	"multusConfigFile": "auto", "socketDir": "/host/run/multus/",
}

// Multus is a Multus thick installation (InstallMultus).
type Multus struct {
	// Image is its image (MultusImage, pushed to the run's registry).
	Image string
	// DaemonConfig is its daemon's configuration; nil is
	// MultusDaemonConfig.
	DaemonConfig map[string]any
	// APIServer, when valid, is where its daemon reaches the apiserver
	// (KUBERNETES_SERVICE_HOST and _PORT), for a cluster that runs no
	// kube-proxy, where the kubernetes Service is not there.
	APIServer netip.AddrPort
}

// Manifest is Multus thick's manifest (addons/multus-daemonset-thick.yml)
// for m.
func (m Multus) Manifest() (string, error) {
	conf := m.DaemonConfig
	if conf == nil {
		conf = MultusDaemonConfig
	}
	b, err := json.MarshalIndent(conf, "    ", "    ")
	if err != nil {
		return "", err
	}
	env := ""
	if m.APIServer.IsValid() {
		env = fmt.Sprintf("            - {name: KUBERNETES_SERVICE_HOST, value: %q}\n            - {name: KUBERNETES_SERVICE_PORT, value: \"%d\"}",
			m.APIServer.Addr(), m.APIServer.Port())
	}
	return renderAddon("multus-daemonset-thick.yml", map[string]string{
		"MULTUS_IMAGE": m.Image, "DAEMON_CONFIG": "    " + string(b), "APISERVER_ENV": env,
	})
}

// InstallMultus applies m's manifest and waits until Multus runs on every
// node and has written its configuration (00-multus.conf) into every
// node's conf dir; it is then the file the runtimes read.
func (c *Cluster) InstallMultus(ctx context.Context, m Multus) error {
	manifest, err := m.Manifest()
	if err != nil {
		return err
	}
	if err := c.applyAndRollOut(ctx, manifest, "kube-system", "ds/kube-multus-ds"); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := waitFile(ctx, n.Path("/etc/cni/net.d/00-multus.conf"), true); err != nil {
			return fmt.Errorf("%s: Multus wrote no configuration: %w", n.Name, err)
		}
	}
	return nil
}

// UninstallMultus deletes what InstallMultus applied (the
// NetworkAttachmentDefinitions go with their CRD) and waits until every
// node's 00-multus.conf is gone: the daemon removes the configuration it
// generated when it stops, and the runtimes read the primary's chain
// again.
func (c *Cluster) UninstallMultus(ctx context.Context, m Multus) error {
	manifest, err := m.Manifest()
	if err != nil {
		return err
	}
	if out, err := c.Kubectl(ctx, manifest, "delete", "--wait=true", "--ignore-not-found", "-f", "-"); err != nil {
		return fmt.Errorf("kubectl delete: %v\n%s", err, out)
	}
	for _, n := range c.Nodes {
		if err := waitFile(ctx, n.Path("/etc/cni/net.d/00-multus.conf"), false); err != nil {
			return fmt.Errorf("%s: Multus left its configuration: %w", n.Name, err)
		}
	}
	return nil
}

// waitFile waits until path exists (exists) or is gone (!exists).
func waitFile(ctx context.Context, path string, exists bool) error {
	for {
		_, err := os.Stat(path)
		if (err == nil) == exists {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ClusterDNS is the kube-dns Service's ClusterIPs: the 10th address of
// ServiceCIDR (and of ServiceCIDR6 when dual-stack), as kubeadm picks it;
// the first is the kubelets' clusterDNS.
func (c *Cluster) ClusterDNS() []netip.Addr {
	tenth := func(p netip.Prefix) netip.Addr {
		a := p.Addr()
		for range 10 {
			a = a.Next()
		}
		return a
	}
	if c.opts.IPv6Only {
		return []netip.Addr{tenth(ServiceCIDR6)}
	}
	dns := []netip.Addr{tenth(ServiceCIDR)}
	if c.opts.DualStack {
		dns = append(dns, tenth(ServiceCIDR6))
	}
	return dns
}

// ClusterDomain is the kubelets' clusterDomain, the zone CoreDNS serves.
const ClusterDomain = "cluster.local"

// RollOut waits up to timeout, and never past ctx's deadline less a
// margin, for `kubectl rollout status` of what ("ds/NAME") in namespace.
// On failure out also holds the namespace's pods described, what's logs
// and the namespace's events, read with a context of their own: a rollout
// that ran into ctx's deadline is exactly when they are needed.
func (c *Cluster) RollOut(ctx context.Context, namespace, what string, timeout time.Duration) (string, error) {
	const margin = 30 * time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d)-margin < timeout {
		timeout = max(time.Until(d)-margin, time.Second)
	}
	out, err := c.Kubectl(ctx, "", "-n", namespace, "rollout", "status", what, fmt.Sprintf("--timeout=%ds", int(timeout.Seconds())))
	if err == nil {
		return out, nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), margin)
	defer cancel()
	desc, _ := c.Kubectl(dctx, "", "-n", namespace, "describe", "pods")
	logs, _ := c.Kubectl(dctx, "", "-n", namespace, "logs", what, "--all-containers", "--tail=40")
	events, _ := c.Kubectl(dctx, "", "-n", namespace, "get", "events", "--sort-by=.lastTimestamp")
	return strings.Join([]string{out, desc, logs, events}, "\n"), err
}

// applyAndRollOut applies manifests and waits for what's rollout.
func (c *Cluster) applyAndRollOut(ctx context.Context, manifests, namespace, what string) error {
	start := time.Now()
	if out, err := c.Kubectl(ctx, manifests, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("kubectl apply: %v\n%s", err, out)
	}
	if out, err := c.RollOut(ctx, namespace, what, 180*time.Second); err != nil {
		return fmt.Errorf("%s/%s did not roll out: %v\n%s", namespace, what, err, out)
	}
	c.logf("%-28s %6.1fs", namespace+"/"+what+" rolled out", time.Since(start).Seconds())
	return nil
}
