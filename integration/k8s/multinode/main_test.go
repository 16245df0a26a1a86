// Package multinode is podwire's test on a real Kubernetes cluster of two
// nodes (package cluster) as podwire's users run one: flannel as the
// primary (its own manifest: kube subnet manager, vxlan, nftables,
// dual-stack), kube-proxy in nftables mode (kubeadm's DaemonSet), dual-stack
// Services, and every image but the pause image pulled from a registry on
// the network outside the nodes, podwire's included (pushed with `make
// push`'s command, installed with `helm install` of deploy/helm/podwire
// pinned by digest, taken to an earlier release and back with `helm
// upgrade` and `helm rollback`, and removed with `helm uninstall`).
// Every claim is proven with packets between pods on different nodes, the
// nodes and the outside network. One cluster serves every test of the
// package: it is started in TestMain and stopped, with every process, mount
// and namespace of the run, when the tests end.
//
// Needs root and what `make test-k8s` provides: PODWIRE_K8S_BIN (the
// Kubernetes binaries of scripts/k8s-build.sh, kube-proxy included),
// PODWIRE_ETCD, PODWIRE_FLANNEL (scripts/flannel-build.sh's directory),
// PODWIRE_BIN, PODWIRE_IMAGE (`make image`), PODWIRE_IMAGE_REF, PODWIRE_HELM
// (scripts/helm-build.sh), PODWIRE_COREDNS (scripts/coredns-build.sh's
// directory, for TestClusterDNS and TestConformance), PODWIRE_MULTUS
// (scripts/multus-build.sh's directory, for TestMultus) and
// PODWIRE_CNI_BIN; TestHelmUpgrade also PODWIRE_PREVIOUS_IMAGE, its _REF
// and PODWIRE_PREVIOUS_CHART (`make image-previous`: the earlier release).
package multinode

import (
	"context"
	"fmt"
	"net/netip"
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
	c            *cluster.Cluster
	podwireBin   string
	podwireImage string // bin/podwire-image.tar of `make image`
	podwireRef   string // the image's name in it, REGISTRY/podwire-agent:VERSION
	helmBin      string // scripts/helm-build.sh's helm
	// podwirePinned is the image pushed to the run's registry, by digest.
	podwirePinned string
)

// Test addresses, all inside the run's namespaces.
var (
	// serverIP and serverIP6 are a server beyond the cluster (on the
	// outside network): pod traffic to them leaves with the node's egress
	// IP.
	serverIP  = netip.MustParseAddr("192.0.2.10")
	serverIP6 = netip.MustParseAddr("2001:db8:99::10")
)

// egressIPs are each node's egress addresses, second addresses on its
// uplink: node i's are 10.99.0.(10+i) and fd99::(10+i) (hex).
func egressIPs(i int) (netip.Addr, netip.Addr) {
	v4 := netip.AddrFrom4([4]byte{10, 99, 0, byte(10 + i)})
	b := cluster.LinkPrefix6.Addr().As16()
	b[15] = byte(0x10 + i)
	return v4, netip.AddrFrom16(b)
}

// suite starts the run's cluster: nodes nodes registered with the startup
// taint as NoExecute (docs/install.md's advice), no primary (flannel is an
// add-on), dual stack; setUp installs the rest.
var suite = cluster.Suite{
	Env: []string{"PODWIRE_K8S_BIN", "PODWIRE_ETCD", "PODWIRE_FLANNEL", "PODWIRE_BIN", "PODWIRE_IMAGE", "PODWIRE_IMAGE_REF",
		"PODWIRE_CNI_BIN", "PODWIRE_HELM"},
	Timeout: 6 * time.Minute,
	Options: func(env map[string]string) cluster.Options {
		return cluster.Options{K8sBinDir: env["PODWIRE_K8S_BIN"], EtcdBin: env["PODWIRE_ETCD"], CNIBinDir: env["PODWIRE_CNI_BIN"],
			Nodes: nodes, Primary: cluster.PrimaryNone, DualStack: true, RegisterTaints: []string{startupTaint + "=:NoExecute"}}
	},
	Setup: setUp,
}

func TestMain(m *testing.M) { os.Exit(suite.Main(m)) }

// needCluster skips a test when TestMain started no cluster.
var needCluster = suite.Need

// setUp starts the registry, pushes the add-ons' images and podwire's
// (and, in the background, TestConformance's: startE2EImages), installs
// kube-proxy and flannel (then every node is Ready, and still
// carries the startup taint its kubelet registered it with), puts the
// test servers' addresses on the outside, runs TestAKSProbe's control
// while no podwire is in any chain, creates TestStartupTaint's early
// Deployment, and installs podwire.
func setUp(ctx context.Context, cl *cluster.Cluster, env map[string]string) (stop func(), err error) {
	c = cl
	podwireBin, podwireImage, podwireRef = env["PODWIRE_BIN"], env["PODWIRE_IMAGE"], env["PODWIRE_IMAGE_REF"]
	helmBin = env["PODWIRE_HELM"]
	if err := c.StartRegistry(); err != nil {
		return nil, err
	}
	images, err := pushAddonImages(ctx, env["PODWIRE_K8S_BIN"], env["PODWIRE_FLANNEL"])
	if err != nil {
		return nil, err
	}
	startE2EImages(ctx, os.Getenv("PODWIRE_E2E"))
	flannelDir := env["PODWIRE_FLANNEL"]
	fmt.Println("versions:")
	for _, l := range append(c.Versions(ctx),
		cluster.VersionLine(ctx, "podwire", podwireBin, "version"),
		cluster.VersionLine(ctx, "flanneld", filepath.Join(flannelDir, "flanneld"), "--version"),
		cluster.CNIVersionLine(ctx, "flannel CNI (VERSION)", filepath.Join(flannelDir, "flannel"))) {
		fmt.Println("  " + l)
	}
	if err := c.InstallKubeProxy(ctx, images.kubeProxy, cluster.KubeProxyBin); err != nil {
		return nil, err
	}
	// InstallFlannel returns once every node is Ready, and says so
	// ("cluster: N nodes Ready").
	if err := c.InstallFlannel(ctx, images.flannel); err != nil {
		return nil, err
	}
	if err := addServerAddrs(); err != nil {
		return nil, err
	}
	probeControlRun(ctx)
	if err := createEarlyDeployment(ctx); err != nil {
		return nil, err
	}
	return nil, deployPodwire(ctx)
}

// agentNS is the chart's namespace.
const agentNS = "podwire-system"

// chartDir is podwire's Helm chart, which the suite installs as an
// operator does.
const chartDir = "../../../deploy/helm/podwire"

// release is the Helm release's name; helm keeps its record in
// releaseNS (the chart's objects go to agentNS).
const release, releaseNS = "podwire", "kube-system"

// podwireValues is the operator's values file for the image pinned (a
// reference REPOSITORY:TAG@sha256:...): podwire's entry on every node is
// the source check, the Azure probe SNAT, and egress from each Node's
// annotation with no exceptCIDRs at all (the cluster's pod CIDRs and node
// IPs are excepted from what the agents read of the Nodes), and
// forwarding pods in forwardingNS, which may route routedNet and
// routedNet6 (TestForwardingAcrossNodes), and the tenancy gates that
// TestHostileTenant attempts (tenancyValues). The runtime
// capability is off: containerd sends no annotations, so every pod's
// annotations come from the node agent, under the chart's RBAC and
// admission policies (guardedLabelKey among the Namespace labels guarded).
// /metrics is on, in the chart's default port, and the agent logs JSON.
// The agent runs on the nodes labelled agentNodeLabel=on.
func podwireValues(pinned string) (map[string]any, error) {
	image, err := cluster.ChartImage(pinned)
	if err != nil {
		return nil, err
	}
	values := map[string]any{
		"image": image,
		"config": map[string]any{
			"runtimeAnnotations": false,
			"logFile":            "/var/log/podwire.log",
			"sourceCheck":        true,
			"egress":             map[string]any{"nodeAnnotation": true},
			"probeSNAT":          map[string]any{"preset": "azure"},
			"forwarding": map[string]any{"namespaces": []string{forwardingNS},
				"routablePrefixes": []string{routedNet.String(), routedNet6.String()}},
		},
		"metrics": map[string]any{"enabled": true},
		"log":     map[string]any{"format": "json"},
		// The nodes carry agentNodeLabel from setUp on: TestClosedByDefault
		// takes it off node 2 to take the agent away from it alone.
		"nodeSelector":      map[string]string{"kubernetes.io/os": "linux", agentNodeLabel: "on"},
		"admissionPolicies": map[string]any{"namespaceLabelKeys": []string{guardedLabelKey}},
	}
	tenancyValues(values["config"].(map[string]any))
	return values, nil
}

// helm runs `helm VERB release chart -f values` (install or upgrade)
// with podwire's values for the image pinned, and waits for the
// DaemonSet's rollout.
func helm(ctx context.Context, verb, pinned string) error {
	return helmChart(ctx, verb, chartDir, pinned)
}

// helmChart is helm with the chart in directory chart: the earlier
// release's, for TestHelmUpgrade. The values are the same for both: an
// earlier chart's values.schema.json refuses a key it does not know.
func helmChart(ctx context.Context, verb, chart, pinned string) error {
	values, err := podwireValues(pinned)
	if err != nil {
		return err
	}
	took, err := c.HelmApply(ctx, cluster.HelmRelease{Helm: helmBin, Chart: chart, Name: release, Namespace: releaseNS,
		DaemonSet: agentNS + "/podwire-agent"}, verb, values, 180*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("podwire: helm %s of %s, agents Ready in %.1fs\n", verb, pinned, took.Seconds())
	return nil
}

// deployPodwire installs podwire as a cluster operator does: the image
// pushed to the registry with `make push`'s command, then `helm install`
// of the chart with the values above, the image pinned by digest. It
// returns once every node's containerd has loaded the chain flannel,
// portmap, podwire.
func deployPodwire(ctx context.Context) error {
	var err error
	if podwirePinned, err = c.PushArchive(ctx, podwireImage, podwireRef); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "", "label", "--overwrite", "nodes", "--all", agentNodeLabel+"=on"); err != nil {
		return err
	}
	if err := helm(ctx, "install", podwirePinned); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := waitChain(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// waitChain waits until n's containerd has loaded flannel's conflist with
// podwire chained after it.
func waitChain(ctx context.Context, n *cluster.Node) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		conf, err := n.CNIConfig(ctx)
		if err == nil && strings.Contains(conf, `\"type\":\"flannel\"`) && strings.Contains(conf, `\"type\":\"podwire\"`) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: containerd never loaded flannel's chain with podwire: %v\n%s", n.Name, err, conf)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
