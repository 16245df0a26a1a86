// Package vlan is podwire's test of VLAN network functions under a real
// kubelet: a two-node cluster (package cluster) run inside the VM of
// scripts/vm-test.sh, whose Debian kernel has the bridge VLAN filtering
// and 8021q that the development kernel lacks. The nodes run in the VM,
// each a kubelet over its own containerd 2.x and runc; the control plane
// (etcd, the apiserver, the controllers) runs on the host, behind the VM's
// one NIC (PODWIRE_CONTROL_PLANE, cluster.StartControlPlane), where TCG
// does not slow it. Each node has a second NIC, named differently on the two (eth1,
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
// PODWIRE_HELM, PODWIRE_PAUSE_ARCHIVE, PODWIRE_VRRP_ARCHIVE (imported on
// every node: the router pods' keepalived, cluster.VRRPImage),
// PODWIRE_IMAGE, PODWIRE_IMAGE_REF, PODWIRE_IMAGE_TOOL and PODWIRE_CHART.
package vlan

import (
	"context"
	"fmt"
	"os"
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
		"PODWIRE_HELM", "PODWIRE_PAUSE_ARCHIVE", "PODWIRE_IMAGE", "PODWIRE_IMAGE_REF", "PODWIRE_IMAGE_TOOL", "PODWIRE_CHART",
		"PODWIRE_VRRP_ARCHIVE", "PODWIRE_CONTROL_PLANE", "PODWIRE_CONTROL_PLANE_NIC"},
	// TCG runs the nodes on two emulated CPUs, at a speed that differs
	// twofold between hosts of the same size: the deadline is the slow
	// host's, a fast one finishes early.
	Timeout: 10 * time.Minute,
	Options: func(env map[string]string) cluster.Options {
		return cluster.Options{K8sBinDir: env["PODWIRE_K8S_BIN"], EtcdBin: env["PODWIRE_ETCD"], CNIBinDir: env["PODWIRE_CNI_BIN"],
			Nodes: nodes, PTPCNIVersion: "1.1.0", PauseArchive: env["PODWIRE_PAUSE_ARCHIVE"], ImageTool: env["PODWIRE_IMAGE_TOOL"],
			ControlPlane: env["PODWIRE_CONTROL_PLANE"], ControlPlaneNIC: env["PODWIRE_CONTROL_PLANE_NIC"], LeanKubelets: true}
	},
	Setup: setUp,
}

func TestMain(m *testing.M) { os.Exit(suite.Main(m)) }

// setUp prints the run's versions, makes the trunk switch, imports the
// VRRP speaker's image, pushes podwire's image and installs the chart.
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
			printCPU()
			releaseTrunk()
		}
	}()
	if err := makeTrunk(); err != nil {
		return nil, err
	}
	if err := c.ImportImage(ctx, env["PODWIRE_VRRP_ARCHIVE"]); err != nil {
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
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	fmt.Printf("  %-24s %s\n", "podwire", first)
	fmt.Printf("vm-k8s: podwire installed in %.1fs\n", time.Since(start).Seconds())
	printCPU()
	return func() {
		printCPU()
		releaseTrunk()
	}, nil
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
// subnets their addresses come from and the VRRP group of its routers,
// forwarding pods in vlanNS, and the apiserver's address (the
// cluster runs no kube-proxy, so the kubernetes Service is not there).
func values() (map[string]any, error) {
	image, err := cluster.ChartImage(podwirePinned)
	if err != nil {
		return nil, err
	}
	return map[string]any{
		"image": image,
		"config": map[string]any{
			"runtimeAnnotations": false,
			"uplink":             strings.Join(uplinks, ","),
			"forwarding":         map[string]any{"namespaces": []string{vlanNS}},
			"vlanGrants": []map[string]any{{
				"vlans": vlanList(), "namespaces": []string{vlanNS},
				"subnets": []string{vlanSubnet.String(), vlan200Subnet.String()}, "exclude": []string{clientIP.String() + "/32", gatewayIP.String() + "/32"},
				"vrrp": fmt.Sprint(vrrpVRID),
			}},
		},
		"kubernetesServicesEndpoint": map[string]any{"host": c.APIServerAddr().String()},
	}, nil
}

// helm runs `helm VERB` of the chart with values() and waits for the
// DaemonSet's rollout.
func helm(ctx context.Context, verb string) error {
	v, err := values()
	if err != nil {
		return err
	}
	took, err := c.HelmApply(ctx, cluster.HelmRelease{Helm: helmBin, Chart: chart, Name: release, Namespace: releaseNS,
		DaemonSet: agentNS + "/podwire-agent"}, verb, v, 300*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("podwire: helm %s of %s, agents Ready in %.1fs\n", verb, podwirePinned, took.Seconds())
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
