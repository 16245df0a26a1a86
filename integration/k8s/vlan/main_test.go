// Package vlan is podwire's test of VLAN network functions under a real
// kubelet: a two-node cluster (package cluster) run inside the VM of
// scripts/vm-test.sh, whose Debian kernel has the bridge VLAN filtering
// and 8021q that the development kernel lacks. Everything runs in the VM:
// etcd, the apiserver and the controllers on the first node as in the
// other suites, and each node's kubelet over its own containerd 2.x and
// runc. Each node has a second NIC, named differently on the two (eth1,
// ens4), trunked through one switch (a VLAN-filtering bridge) that also
// reaches a client outside the nodes. podwire is installed as users
// install it: its image pushed to the run's registry, `helm install` of
// deploy/helm/podwire pinned by digest, with vlanGrants and the uplink in
// the values. Pods are created through the API; every claim is proven
// with packets sent by the test inside the pods' network namespaces.
//
// Needs root, the VM's kernel and what `make test-vm-k8s` passes into the
// VM (scripts/vm-test.sh, PODWIRE_VM_SUITE=k8s): PODWIRE_K8S_BIN,
// PODWIRE_ETCD, PODWIRE_CONTAINERD_DIR, PODWIRE_RUNC, PODWIRE_CNI_BIN,
// PODWIRE_HELM, PODWIRE_PAUSE_ARCHIVE, PODWIRE_IMAGE, PODWIRE_IMAGE_REF,
// PODWIRE_IMAGE_TOOL and PODWIRE_CHART.
package vlan

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

// nodes is the size of the cluster.
const nodes = 2

var (
	c       *cluster.Cluster
	helmBin string
	chart   string
	// podwirePinned is podwire's image in the run's registry, by digest.
	podwirePinned string
)

var suite = cluster.Suite{
	Env: []string{"PODWIRE_K8S_BIN", "PODWIRE_ETCD", "PODWIRE_CNI_BIN", "PODWIRE_CONTAINERD_DIR", "PODWIRE_RUNC",
		"PODWIRE_HELM", "PODWIRE_PAUSE_ARCHIVE", "PODWIRE_IMAGE", "PODWIRE_IMAGE_REF", "PODWIRE_IMAGE_TOOL", "PODWIRE_CHART"},
	Timeout: 8 * time.Minute,
	Options: func(env map[string]string) cluster.Options {
		return cluster.Options{K8sBinDir: env["PODWIRE_K8S_BIN"], EtcdBin: env["PODWIRE_ETCD"], CNIBinDir: env["PODWIRE_CNI_BIN"],
			Nodes: nodes, PTPCNIVersion: "1.1.0", PauseArchive: env["PODWIRE_PAUSE_ARCHIVE"], ImageTool: env["PODWIRE_IMAGE_TOOL"]}
	},
	Setup: setUp,
}

func TestMain(m *testing.M) { os.Exit(suite.Main(m)) }

// setUp prints the run's versions, makes the trunk switch, pushes
// podwire's image and installs the chart.
func setUp(ctx context.Context, cl *cluster.Cluster, env map[string]string) (stop func(), err error) {
	c = cl
	helmBin, chart = env["PODWIRE_HELM"], env["PODWIRE_CHART"]
	start := time.Now()
	fmt.Printf("vm-k8s: %d nodes Ready\n", len(c.Nodes))
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Println("versions:")
	for _, l := range append([]string{fmt.Sprintf("%-24s %s", "kernel", strings.TrimSpace(string(kernel)))}, c.Versions(ctx)...) {
		fmt.Println("  " + l)
	}
	defer func() {
		if err != nil {
			releaseTrunk()
		}
	}()
	if err := makeTrunk(); err != nil {
		return nil, err
	}
	if err := c.StartRegistry(); err != nil {
		return nil, err
	}
	if podwirePinned, err = c.PushArchive(ctx, env["PODWIRE_IMAGE"], env["PODWIRE_IMAGE_REF"]); err != nil {
		return nil, err
	}
	if err := helm(ctx, "install"); err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if err := waitChain(ctx, n); err != nil {
			return nil, err
		}
	}
	out, _ := c.Kubectl(ctx, "", "-n", agentNS, "exec", "ds/podwire-agent", "--", "podwire", "version")
	fmt.Printf("  %-24s %s\n", "podwire", strings.TrimSpace(out))
	fmt.Printf("vm-k8s: podwire installed in %.1fs\n", time.Since(start).Seconds())
	return releaseTrunk, nil
}

// agentNS is the chart's namespace; release the Helm release, recorded in
// releaseNS.
const (
	agentNS            = "podwire-system"
	release, releaseNS = "podwire", "kube-system"
)

// vlanNS is the namespace granted the VLANs (vlanGrants).
const vlanNS = "vlan-a"

// values are the operator's values: the image pinned, the trunk NIC by
// its names on the two nodes, the VLANs granted to vlanNS with the
// subnet their addresses come from, and the apiserver's address (the
// cluster runs no kube-proxy, so the kubernetes Service is not there).
func values() (map[string]any, error) {
	name, digest, ok := strings.Cut(podwirePinned, "@")
	i := strings.LastIndex(name, ":")
	if !ok || i < strings.LastIndex(name, "/") {
		return nil, fmt.Errorf("image reference %q is not REPOSITORY:TAG@DIGEST", podwirePinned)
	}
	return map[string]any{
		"image": map[string]any{"repository": name[:i], "tag": name[i+1:], "digest": digest},
		"config": map[string]any{
			"runtimeAnnotations": false,
			"uplink":             strings.Join(uplinks, ","),
			"vlanGrants": []map[string]any{{
				"vlans": vlanList(), "namespaces": []string{vlanNS},
				"subnets": []string{vlanSubnet.String()}, "exclude": []string{clientIP.String() + "/32"},
			}},
		},
		"kubernetesServicesEndpoint": map[string]any{"host": c.Nodes[0].IP.String()},
	}, nil
}

// helm runs `helm VERB` of the chart with values() and waits for the
// DaemonSet's rollout.
func helm(ctx context.Context, verb string) error {
	v, err := values()
	if err != nil {
		return err
	}
	b, err := json.Marshal(v) // YAML's superset: a values file as it is
	if err != nil {
		return err
	}
	file := filepath.Join(c.Dir, "podwire-values-"+verb+".yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return err
	}
	start := time.Now()
	if _, err := c.Helm(ctx, helmBin, verb, release, chart, "--namespace", releaseNS, "-f", file); err != nil {
		return err
	}
	if out, err := c.Kubectl(ctx, "", "-n", agentNS, "rollout", "status", "ds/podwire-agent", "--timeout=300s"); err != nil {
		desc, _ := c.Kubectl(ctx, "", "-n", agentNS, "describe", "pods")
		logs, _ := c.Kubectl(ctx, "", "-n", agentNS, "logs", "ds/podwire-agent", "--tail=40")
		return fmt.Errorf("the DaemonSet did not roll out after helm %s: %v\n%s\n%s\n%s", verb, err, out, desc, logs)
	}
	fmt.Printf("podwire: helm %s of %s, agents Ready in %.1fs\n", verb, podwirePinned, time.Since(start).Seconds())
	return nil
}

// waitChain waits until n's containerd has loaded the ptp conflist with
// podwire chained after it.
func waitChain(ctx context.Context, n *cluster.Node) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		conf, err := n.CNIConfig(ctx)
		if err == nil && strings.Contains(conf, `\"type\":\"ptp\"`) && strings.Contains(conf, `\"type\":\"podwire\"`) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: containerd never loaded the ptp chain with podwire: %v\n%s", n.Name, err, conf)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
