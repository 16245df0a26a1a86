// Package calico is podwire's test on a real single-node Kubernetes
// cluster (package cluster) whose primary is Calico, as most enterprise
// clusters run it: Calico's own manifest (Kubernetes API datastore, VXLAN,
// no BGP) with calico-node's processes as its image runs them, Felix in
// nftables mode beside kube-proxy in nftables mode, dual stack, and podwire
// installed with `helm install` after Calico's own conflist, as users
// install it. Calico's veths are routed (podwire's `inet` path), and
// Felix filters the same traffic podwire does: its own anti-spoofing (a
// strict reverse-path check by FIB lookup on every workload interface),
// its own NAT for the IP pools' natOutgoing, and its own tables and chain
// priorities beside podwire's. Every claim is proven with packets between
// the pods, the node and the network outside it, and each guard's control
// shows which layer drops: podwire's check with Felix allowing, Felix's
// with podwire lifting.
//
// Needs root and what `make test-k8s` provides: PODWIRE_K8S_BIN (the
// Kubernetes binaries, kube-proxy included), PODWIRE_ETCD, PODWIRE_CALICO
// (scripts/calico-build.sh's directory), PODWIRE_BIN, PODWIRE_IMAGE,
// PODWIRE_IMAGE_REF, PODWIRE_HELM and PODWIRE_CNI_BIN.
package calico

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

var (
	c            *cluster.Cluster
	n1           *cluster.Node // the cluster's one node
	podwireBin   string
	podwireImage string // bin/podwire-image.tar of `make image`
	podwireRef   string // the image's name in it, REGISTRY/podwire-agent:VERSION
	helmBin      string
	calicoImages calicoRefs
	// calicoVersion is what calico-node -v printed.
	calicoVersion string
)

// calicoRefs are Calico's images in the run's registry, pinned by digest.
type calicoRefs struct{ node, cni string }

// Test addresses, all inside the run's namespaces.
var (
	// serverIP and serverIP6 are a server beyond the cluster (on the
	// outside network): pod traffic to them leaves SNATed, by Calico's
	// natOutgoing or by podwire's egress IP.
	serverIP  = netip.MustParseAddr("192.0.2.10")
	serverIP6 = netip.MustParseAddr("2001:db8:99::10")
	// egressIP and egressIP6 are the node's egress addresses, second
	// addresses on its uplink.
	egressIP  = netip.MustParseAddr("10.99.0.10")
	egressIP6 = netip.MustParseAddr("fd99::10")
	// routedNet and routedNet6 are the client network behind a router
	// pod that podwire routes to it (podwire.io/routes), and that the
	// outside routes to the node.
	routedNet  = netip.MustParsePrefix("198.51.100.0/24")
	routedNet6 = netip.MustParsePrefix("2001:db8:5100::/64")
	// transitNet and transitNet6 are a client network behind a router
	// pod that nothing routes to it: its sources pass Felix's
	// reverse-path check only through Calico's own annotation.
	transitNet  = netip.MustParsePrefix("198.18.0.0/24")
	transitNet6 = netip.MustParsePrefix("2001:db8:18::/64")
)

// forwardingNS is forwarding.namespaces of podwire's values.
const forwardingNS = "nf-calico"

// startupTaint is podwire's startup taint, which the node registers with.
const startupTaint = "podwire.io/agent-not-ready"

// felixConfig is FelixConfiguration "default" as the README's Calico
// recipe sets it on single-stack IPv4: workloadSourceSpoofing Any (a pod's
// cni.projectcalico.org/allowedSourcePrefixes may then lift Felix's
// reverse-path check) and removeExternalRoutes false (Felix otherwise
// takes every route via a cali* interface for its own and deletes
// podwire.io/routes'). The dual-stack leg keeps Any too, where the recipe
// says Disabled, so that TestCalicoAnnotationDualStack shows why. The
// route refresh is shorter than Felix's default, so that TestRoutedTransit
// sees Felix's resyncs within its wait.
func felixConfig() map[string]any {
	return map[string]any{"workloadSourceSpoofing": "Any", "removeExternalRoutes": false, "routeRefreshInterval": "5s"}
}

// suite starts the run's cluster: one node registered with podwire's
// startup taint as NoExecute, no primary (Calico is an add-on) but a
// /var/lib/calico of the node's own, dual stack, the outside routing the
// IP pools and routedNet to the node. Its second leg is single-stack IPv4,
// as Calico's own manifest runs Felix (FELIX_IPV6SUPPORT false): the one
// shape in which Calico v3.30.1 honours a pod's allowedSourcePrefixes
// (TestCalicoAnnotationDualStack says why), where TestWhichLayerDrops runs.
var suite = cluster.Suite{
	Env: []string{"PODWIRE_K8S_BIN", "PODWIRE_ETCD", "PODWIRE_CALICO", "PODWIRE_BIN", "PODWIRE_IMAGE", "PODWIRE_IMAGE_REF",
		"PODWIRE_CNI_BIN", "PODWIRE_HELM"},
	Timeout: 6 * time.Minute,
	Options: func(env map[string]string) cluster.Options {
		return cluster.Options{K8sBinDir: env["PODWIRE_K8S_BIN"], EtcdBin: env["PODWIRE_ETCD"], CNIBinDir: env["PODWIRE_CNI_BIN"],
			Primary: cluster.PrimaryNone, Calico: true, DualStack: true, RegisterTaints: []string{startupTaint + "=:NoExecute"},
			OutsideRoutes: []netip.Prefix{cluster.ClusterCIDR, cluster.ClusterCIDR6, routedNet, routedNet6}}
	},
	Setup: setUp,
	Legs: []cluster.Leg{{Name: "on single-stack IPv4, Felix's IPv6 off (Calico's manifest's default)", Options: func(o *cluster.Options) {
		o.DualStack, o.OutsideRoutes = false, []netip.Prefix{cluster.ClusterCIDR, routedNet}
	}}},
}

// needDualStack skips a test on the IPv4 leg; needIPv4Leg skips one on the
// dual-stack leg.
func needDualStack(t *testing.T) {
	t.Helper()
	needCluster(t)
	if !c.DualStack() {
		t.Skip("runs on the dual-stack leg")
	}
}

func needIPv4Leg(t *testing.T) {
	t.Helper()
	needCluster(t)
	if c.DualStack() {
		t.Skip("runs on the single-stack IPv4 leg")
	}
}

func TestMain(m *testing.M) { os.Exit(suite.Main(m)) }

// needCluster skips a test when TestMain started no cluster.
var needCluster = suite.Need

// setUp starts the registry, pushes kube-proxy's and Calico's images,
// prints the versions, installs kube-proxy and Calico (then the node is
// Ready, and still carries the startup taint), puts the test server's
// addresses on the outside, and installs podwire.
func setUp(ctx context.Context, cl *cluster.Cluster, env map[string]string) (stop func(), err error) {
	c, n1 = cl, cl.Nodes[0]
	podwireBin, podwireImage, podwireRef = env["PODWIRE_BIN"], env["PODWIRE_IMAGE"], env["PODWIRE_IMAGE_REF"]
	helmBin = env["PODWIRE_HELM"]
	calicoDir := env["PODWIRE_CALICO"]
	if err := c.StartRegistry(); err != nil {
		return nil, err
	}
	var kubeProxy string
	start := time.Now()
	for _, im := range []struct {
		repoTag string
		build   func() (v1.Image, error)
		ref     *string
	}{
		{"kubernetes/kube-proxy:v1.37.2", func() (v1.Image, error) { return cluster.KubeProxyImage(env["PODWIRE_K8S_BIN"]) }, &kubeProxy},
		{"calico/node:v3.30.1", func() (v1.Image, error) { return cluster.CalicoNodeImage(calicoDir) }, &calicoImages.node},
		{"calico/cni:v3.30.1", func() (v1.Image, error) { return cluster.CalicoCNIImage(calicoDir) }, &calicoImages.cni},
	} {
		img, err := im.build()
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", im.repoTag, err)
		}
		if *im.ref, err = c.Push(ctx, img, im.repoTag); err != nil {
			return nil, err
		}
	}
	fmt.Printf("registry: kube-proxy and Calico images built and pushed in %.1fs\n", time.Since(start).Seconds())
	calicoLine := cluster.VersionLine(ctx, "calico-node (-v)", filepath.Join(calicoDir, "calico-node"), "-v")
	calicoVersion = strings.TrimSpace(strings.TrimPrefix(calicoLine, "calico-node (-v)"))
	fmt.Println("versions:")
	for _, l := range append(c.Versions(ctx),
		cluster.VersionLine(ctx, "podwire", podwireBin, "version"), calicoLine,
		cluster.CNIVersionLine(ctx, "calico CNI (VERSION)", filepath.Join(calicoDir, "calico"))) {
		fmt.Println("  " + l)
	}
	if err := c.InstallKubeProxy(ctx, kubeProxy, cluster.KubeProxyBin); err != nil {
		return nil, err
	}
	if err := c.InstallCalico(ctx, cluster.Calico{NodeImage: calicoImages.node, CNIImage: calicoImages.cni, Felix: felixConfig()}); err != nil {
		return nil, err
	}
	servers := []netip.Prefix{netip.PrefixFrom(serverIP, 32)}
	if c.DualStack() {
		servers = append(servers, netip.PrefixFrom(serverIP6, 128))
	}
	if err := uplinkAddrs(c.OutsideNetNS, servers...); err != nil {
		return nil, err
	}
	return nil, deployPodwire(ctx)
}

// agentNS is the chart's namespace; the release's record is in releaseNS.
const agentNS, release, releaseNS = "podwire-system", "podwire", "kube-system"

// chartDir is podwire's Helm chart, which the suite installs as an
// operator does.
const chartDir = "../../../deploy/helm/podwire"

// podwireValues is the operator's values file for Calico, the README's
// recipe: the source check, the Azure probe SNAT, egress from the Node's
// annotation with the IP pools in exceptCIDRs (Calico's IPAM takes pod
// addresses from its pools' blocks, not from the Node's podCIDRs, which
// the agent excepts), and forwarding pods in forwardingNS, which may route
// routedNet and routedNet6. The runtime capability is off: every pod's
// annotations come from the node agent.
func podwireValues(pinned string) (map[string]any, error) {
	image, err := cluster.ChartImage(pinned)
	if err != nil {
		return nil, err
	}
	return map[string]any{
		"image": image,
		"config": map[string]any{
			"runtimeAnnotations": false,
			"logFile":            "/var/log/podwire.log",
			"sourceCheck":        true,
			"egress": map[string]any{"nodeAnnotation": true,
				"exceptCIDRs": []string{cluster.ClusterCIDR.String(), cluster.ClusterCIDR6.String()}},
			"probeSNAT": map[string]any{"preset": "azure"},
			"forwarding": map[string]any{"namespaces": []string{forwardingNS},
				"routablePrefixes": []string{routedNet.String(), routedNet6.String()}},
		},
	}, nil
}

// deployPodwire pushes podwire's image with `make push`'s command and
// installs the chart pinned by digest; it returns once the node's
// containerd has loaded Calico's chain with podwire after it.
func deployPodwire(ctx context.Context) error {
	pinned, err := c.PushArchive(ctx, podwireImage, podwireRef)
	if err != nil {
		return err
	}
	values, err := podwireValues(pinned)
	if err != nil {
		return err
	}
	took, err := c.HelmApply(ctx, cluster.HelmRelease{Helm: helmBin, Chart: chartDir, Name: release, Namespace: releaseNS,
		DaemonSet: agentNS + "/podwire-agent"}, "install", values, 180*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("podwire: helm install of %s, agent Ready in %.1fs\n", pinned, took.Seconds())
	return waitChain(ctx)
}

// waitChain waits until the node's containerd has loaded Calico's
// conflist with podwire chained after it.
func waitChain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		conf, err := n1.CNIConfig(ctx)
		if err == nil && strings.Contains(conf, `\"type\":\"calico\"`) && strings.Contains(conf, `\"type\":\"podwire\"`) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("containerd never loaded Calico's chain with podwire: %v\n%s", err, conf)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
