// Package k8s is podwire's test on a real single-node Kubernetes cluster
// (package cluster): pods are created through the API with kubectl, the
// kubelet runs them over containerd 2.x, the primary is ptp + host-local at
// cniVersion 1.1.0 (so containerd calls the chain's STATUS, podwire's
// included, on every CRI Status the kubelet makes), and podwire is
// installed as a cluster operator does: `kubectl apply -f deploy/` (its
// DaemonSet's agent chains podwire). Every claim is proven with packets
// between the pods, the node and the network outside it (another netns
// behind the node's uplink). One cluster serves every test of the package:
// it is started in TestMain and stopped, with every process, mount and
// namespace of the run, when the tests end. Then every test runs again on a
// second cluster whose node runs CRI-O (PODWIRE_CRIO_DIR,
// scripts/crio-build.sh) with the same runc and Debian's conmon: CRI-O
// polls the chain's STATUS every 5 s instead (cni_status_grace_period) and
// calls its GC when it starts (TestRuntimeGC).
//
// Needs root and what `make test-k8s` provides: PODWIRE_K8S_BIN (the
// Kubernetes binaries of scripts/k8s-build.sh), PODWIRE_ETCD,
// PODWIRE_CONTAINERD_DIR and PODWIRE_RUNC (scripts/containerd-build.sh's
// containerd and runc: containerd calls STATUS from 2.0.1), PODWIRE_BIN,
// PODWIRE_IMAGE (`make image`) and PODWIRE_IMAGE_REF (the name it records),
// PODWIRE_CNI_BIN.
package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

// The run's cluster and podwire's files on its node.
var (
	c            *cluster.Cluster
	n1           *cluster.Node // the cluster's one node
	podwireBin   string
	podwireImage string // bin/podwire-image.tar of `make image`
	podwireRef   string // the image's name in it, REGISTRY/podwire-agent:VERSION
	// podwirePinned is the image pushed to the run's registry, by digest:
	// 10.99.0.2:5000/podwire/podwire-agent:VERSION@sha256:...
	podwirePinned string
	podwireEntry  []byte // podwire's entry, in the ConfigMap podwire-config
	stateDir      string // the node's /run/podwire, seen from the host
	readiness     *readinessMonitor
)

// addressFamily is the test addresses of one IP family, all inside the
// run's namespaces; setUp picks the leg's (fam).
type addressFamily struct {
	// routedNet is forwarding.routablePrefixes: the client network behind
	// a forwarding pod, which the node routes to it (podwire.io/routes);
	// routedHalf a narrower route inside it (TestDeletion).
	routedNet, routedHalf netip.Prefix
	// clientGW and client are the forwarding pod's and its client's
	// addresses on the network behind it, in routedNet.
	clientGW, client netip.Prefix
	// serverIP is a server outside the node beyond the exceptCIDRs: pod
	// traffic to it leaves with the node's egress IP.
	serverIP netip.Addr
	// egressIP is the node's egress address, a second address on its
	// uplink (in linkPrefix).
	egressIP netip.Addr
	// outsideIP is the network outside the node (cluster.OutsideIP or
	// cluster.OutsideIP6), linkPrefix the uplinks' segment, serviceCIDR
	// the Services' range.
	outsideIP               netip.Addr
	linkPrefix, serviceCIDR netip.Prefix
	// nowhere is a source from nowhere (forgedSources).
	nowhere netip.Addr
}

var (
	ipv4 = addressFamily{
		routedNet: netip.MustParsePrefix("198.51.100.0/24"), routedHalf: netip.MustParsePrefix("198.51.100.128/25"),
		clientGW: netip.MustParsePrefix("198.51.100.1/24"), client: netip.MustParsePrefix("198.51.100.2/24"),
		serverIP: netip.MustParseAddr("192.0.2.10"), egressIP: netip.MustParseAddr("10.99.0.10"),
		outsideIP: cluster.OutsideIP, linkPrefix: cluster.LinkPrefix, serviceCIDR: cluster.ServiceCIDR,
		nowhere: netip.MustParseAddr("203.0.113.66"),
	}
	ipv6 = addressFamily{
		routedNet: netip.MustParsePrefix("2001:db8:100::/64"), routedHalf: netip.MustParsePrefix("2001:db8:100:0:8000::/65"),
		clientGW: netip.MustParsePrefix("2001:db8:100::1/64"), client: netip.MustParsePrefix("2001:db8:100::2/64"),
		serverIP: netip.MustParseAddr("2001:db8:2::10"), egressIP: netip.MustParseAddr("fd99::10"),
		outsideIP: cluster.OutsideIP6, linkPrefix: cluster.LinkPrefix6, serviceCIDR: cluster.ServiceCIDR6,
		nowhere: netip.MustParseAddr("2001:db8:66::66"),
	}
	// fam is the leg's family: ipv6 on the single-stack IPv6 leg.
	fam = ipv4
)

// missingUplink is the VLAN uplink the config names and the node never has.
const missingUplink = "pwk8s-up0"

// deployDir is deploy/, applied with the image under test (deployManifests).
const deployDir = "../../deploy"

// allowedNS matches forwarding.namespaces.
const allowedNS = "nf-k8s"

// primaryCNIVersion is the ptp conflist's cniVersion: the first with
// STATUS.
const primaryCNIVersion = "1.1.0"

// suite starts the run's cluster with the outside network routing
// routedNet to the node and the primary at primaryCNIVersion, then installs
// podwire (setUp).
var suite = cluster.Suite{
	Env: append([]string{"PODWIRE_K8S_BIN", "PODWIRE_ETCD", "PODWIRE_BIN", "PODWIRE_IMAGE", "PODWIRE_IMAGE_REF", "PODWIRE_CNI_BIN"},
		cluster.RuntimeEnv...),
	Timeout: 4 * time.Minute,
	Options: func(env map[string]string) cluster.Options {
		return cluster.Options{K8sBinDir: env["PODWIRE_K8S_BIN"], EtcdBin: env["PODWIRE_ETCD"], CNIBinDir: env["PODWIRE_CNI_BIN"],
			OutsideRoutes: []netip.Prefix{ipv4.routedNet, ipv6.routedNet}, PTPCNIVersion: primaryCNIVersion}
	},
	Setup:   setUp,
	CRIOLeg: true,
	IPv6Leg: true,
}

func TestMain(m *testing.M) { os.Exit(suite.Main(m)) }

// needCluster skips a test when TestMain started no cluster.
var needCluster = suite.Need

// setUp prints the versions, installs podwire (deployPodwire) and starts
// the readiness monitor, which stop ends.
func setUp(ctx context.Context, cl *cluster.Cluster, env map[string]string) (stop func(), err error) {
	c, n1 = cl, cl.Nodes[0]
	fam = ipv4
	if c.IPv6Only() {
		fam = ipv6
	}
	podwireBin, podwireImage, podwireRef = env["PODWIRE_BIN"], env["PODWIRE_IMAGE"], env["PODWIRE_IMAGE_REF"]
	fmt.Println("versions:")
	for _, l := range append(c.Versions(ctx),
		cluster.VersionLine(ctx, "podwire", podwireBin, "version"),
		cluster.CNIVersionLine(ctx, "ptp (VERSION)", filepath.Join(n1.CNIBinDir, "ptp"))) {
		fmt.Println("  " + l)
	}
	if c.IPv6Only() {
		if err := checkSingleStackIPv6(ctx); err != nil {
			return nil, err
		}
	}
	if err := deployPodwire(ctx); err != nil {
		return nil, fmt.Errorf("kubectl apply -f deploy/: %w\n%s", err, describeAgent(ctx))
	}
	readiness = startReadinessMonitor()
	return readiness.stop, nil
}

// checkSingleStackIPv6 checks that the IPv6 leg's cluster is what it
// claims: the Node's InternalIPs and the kubernetes Service's families are
// IPv6 only.
func checkSingleStackIPv6(ctx context.Context) error {
	ips, err := c.Kubectl(ctx, "", "get", "node", n1.Name, "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`)
	if err != nil {
		return err
	}
	families, err := c.Kubectl(ctx, "", "get", "service", "kubernetes", "-o", "jsonpath={.spec.ipFamilies} {.spec.clusterIPs}")
	if err != nil {
		return err
	}
	for _, ip := range strings.Fields(ips) {
		if a, err := netip.ParseAddr(ip); err != nil || !a.Is6() {
			return fmt.Errorf("the single-stack IPv6 cluster's Node has InternalIP %q", ip)
		}
	}
	if ips == "" || !strings.HasPrefix(families, `["IPv6"] `) {
		return fmt.Errorf("not single-stack IPv6: Node InternalIPs %q, kubernetes Service %s", ips, families)
	}
	fmt.Printf("single-stack IPv6: Node InternalIP %s, kubernetes Service %s\n", ips, families)
	return nil
}

// podwireConfig is podwire's entry on this node: the source check, the
// forwarding gate (nf-*), egress from the Node annotation (which the node
// agent writes into stateDir), and a VLAN uplink that does not exist on the
// node; on the IPv6 leg, the Azure probe SNAT too (TestProbeSNAT). The runtime capability is off: containerd sends no annotations, so
// every pod's annotations come from the node agent, under deploy/'s RBAC.
// stateDir is the default, /run/podwire, deploy/'s hostPath.
func podwireConfig() map[string]any {
	conf := map[string]any{
		"type":         "podwire",
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": false},
		"logFile":      "/var/log/podwire.log",
		"sourceCheck":  true,
		"uplink":       missingUplink,
		"allowedVLANs": "100-199",
		"forwarding":   map[string]any{"namespaces": []string{"nf-*"}, "routablePrefixes": []string{fam.routedNet.String()}},
		"egress": map[string]any{
			"exceptCIDRs":    []string{n1.PodCIDR.String(), fam.serviceCIDR.String(), fam.linkPrefix.String()},
			"nodeAnnotation": true,
		},
	}
	if c.IPv6Only() {
		conf["probeSNAT"] = map[string]any{"preset": "azure"}
	}
	return conf
}

// agentNS is deploy/'s namespace.
const agentNS = "podwire-system"

// deployPodwire installs podwire as a cluster operator does: the image
// (`make image`) pushed to a registry (pushImage), podwire's entry in the
// ConfigMap podwire-config, the apiserver's address in the ConfigMap
// kubernetes-services-endpoint (this cluster runs no kube-proxy, so the
// kubernetes Service does not route), then deploy/ applied with its image
// set to the pushed one, pinned by digest (as docs/install.md tells). The
// DaemonSet's agent installs the plugin binary into the node's /opt/cni/bin
// and chains podwire into the primary's conflist. It returns once
// containerd has loaded the chain and the agent has written the node's
// egress file, without which an ADD with egress.nodeAnnotation is refused
// with error 11.
func deployPodwire(ctx context.Context) error {
	var err error
	if podwireEntry, err = json.Marshal(podwireConfig()); err != nil {
		return err
	}
	stateDir = n1.Path("/run/podwire")
	if podwirePinned, err = pushImage(ctx); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "", "apply", "-f", filepath.Join(deployDir, "00-namespace.yaml")); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "", "-n", agentNS, "create", "configmap", "podwire-config",
		"--from-literal=entry="+string(podwireEntry)); err != nil {
		return err
	}
	apiHost := n1.IP
	if c.IPv6Only() {
		apiHost = n1.IP6
	}
	if _, err := c.Kubectl(ctx, "", "-n", agentNS, "create", "configmap", "kubernetes-services-endpoint",
		"--from-literal=KUBERNETES_SERVICE_HOST="+apiHost.String(),
		"--from-literal=KUBERNETES_SERVICE_PORT=6443"); err != nil {
		return err
	}
	if err := applyDeploy(ctx); err != nil {
		return err
	}
	// The kubelet pulled the pushed index from the run's registry (nothing
	// was imported): the agent container's image ID is its digest there
	// (containerd's), or, with CRI-O, one of the digests its image store
	// keeps for the pull: the index's or its platform images'. The index
	// lists the image's SBOM too (platform unknown/unknown), which the
	// runtime must have skipped.
	repo := cluster.RegistryHost + "/podwire/podwire-agent@"
	index := podwirePinned[strings.LastIndex(podwirePinned, "@")+1:]
	sbomManifest, err := cluster.ArchiveIndexSBOM(podwireImage, index)
	if err != nil {
		return err
	}
	ids, err := c.Kubectl(ctx, "", "-n", agentNS, "get", "pods",
		"-o", "jsonpath={.items[*].status.containerStatuses[*].imageID}")
	want := []string{index}
	if c.Runtime().IsCRIO() {
		manifests, err := cluster.ArchiveIndexManifests(podwireImage, index)
		if err != nil {
			return err
		}
		want = append(want, slices.DeleteFunc(manifests, func(m string) bool { return m == sbomManifest })...)
	}
	got, _ := strings.CutPrefix(strings.TrimSpace(ids), repo)
	if err != nil || !slices.Contains(want, got) {
		return fmt.Errorf("the agent runs image %q, want %s and one of %v: %v", ids, repo, want, err)
	}
	if err := waitCNIConfig(ctx, true); err != nil {
		return err
	}
	return waitFile(ctx, filepath.Join(stateDir, egressFile), func([]byte) bool { return true })
}

// applyDeploy applies deploy/ with the image pushed (deployManifests)
// and waits for the DaemonSet's rollout: the agent is Ready (informers
// synced, podwire in the chain).
func applyDeploy(ctx context.Context) error {
	start := time.Now()
	manifests, err := deployManifests(podwirePinned)
	if err != nil {
		return err
	}
	if out, err := c.Kubectl(ctx, manifests, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("kubectl apply -f deploy/: %v\n%s", err, out)
	}
	if out, err := c.RollOut(ctx, agentNS, "ds/podwire-agent", 120*time.Second); err != nil {
		return fmt.Errorf("the DaemonSet did not roll out: %v\n%s", err, out)
	}
	fmt.Printf("podwire: deploy/ applied, agent Ready in %.1fs\n", time.Since(start).Seconds())
	return nil
}

// deployManifests is deploy/*.yaml, in order, with the agent's image (the
// release's, pinned by tag or digest, which this cluster cannot pull)
// replaced by image; every other line as shipped.
func deployManifests(image string) (string, error) {
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no manifests in %s: %v", deployDir, err)
	}
	re := regexp.MustCompile(`(?m)^(\s+image:\s*)\S+/podwire-agent[:@]\S+$`)
	var docs []string
	replaced := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		replaced += len(re.FindAll(b, -1))
		docs = append(docs, re.ReplaceAllString(string(b), "${1}"+image))
	}
	if replaced != 1 {
		return "", fmt.Errorf("deploy/ names the podwire-agent image %d times, want once", replaced)
	}
	return strings.Join(docs, "\n---\n"), nil
}

// pushImage pushes the archive of `make image` to the run's registry
// (cluster.StartRegistry, on the outside network) under its version tag
// with the push command of `make push` (tools/image push), run in the
// outside netns, and returns the reference it printed, pinned by digest. The
// kubelet then pulls it from there through containerd, which unpacks the
// node's platform of the multi-arch index.
func pushImage(ctx context.Context) (string, error) {
	if err := c.StartRegistry(); err != nil {
		return "", err
	}
	start := time.Now()
	pinned, err := c.PushArchive(ctx, podwireImage, podwireRef)
	if err != nil {
		return "", err
	}
	fmt.Printf("podwire: pushed %s in %.1fs\n", pinned, time.Since(start).Seconds())
	return pinned, nil
}

// describeAgent is what tells why the agent's pod is not Ready.
func describeAgent(ctx context.Context) string {
	out, _ := c.Kubectl(ctx, "", "-n", agentNS, "describe", "pods")
	return out + "\n" + agentLog(ctx)
}

// agentLog is the tail of the agent's log (it logs to stderr).
func agentLog(ctx context.Context) string {
	out, err := c.Kubectl(ctx, "", "-n", agentNS, "logs", "ds/podwire-agent", "--tail=40")
	if err != nil {
		return fmt.Sprintf("kubectl logs: %v: %s", err, out)
	}
	return out
}

// egressFile is where the agent writes the Node's egress annotation.
const egressFile = "node-egress-ip.cache"

// waitFile waits up to 30 s until path exists and ok accepts its content.
func waitFile(ctx context.Context, path string, ok func([]byte) bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		b, err := os.ReadFile(path)
		if err == nil && ok(b) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s never had the expected content: %v\n%s", path, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitCNIConfig waits until the runtime has (re)loaded a conflist with
// (or without) podwire in its chain: it reloads on the conf dir's inotify
// events, asynchronously. containerd reports what it loaded; CRI-O does
// not, so on CRI-O it waits until the primary's conflist is as wanted and
// crio has loaded its networks since the file last changed (crioLoaded).
func waitCNIConfig(ctx context.Context, withPodwire bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		conf, err := n1.CNIConfig(ctx)
		if errors.Is(err, cluster.ErrNoCNIConfig) {
			conf, err = crioLoaded()
			if err == nil && podwireEntryRE.MatchString(conf) == withPodwire {
				return nil
			}
		} else if err == nil && strings.Contains(conf, `\"type\":\"podwire\"`) == withPodwire {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("containerd's CNI config never had podwire=%v: %v\n%s", withPodwire, err, conf)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// podwireEntryRE matches podwire's entry in a conflist file.
var podwireEntryRE = regexp.MustCompile(`"type":\s*"podwire"`)

// crioLoaded returns the primary's conflist once crio has loaded its CNI
// networks (its log's "Updated default CNI network name" line, written
// after each reload) at or after the file's last change; an error until
// then.
func crioLoaded() (string, error) {
	fi, err := os.Stat(n1.PrimaryConflist)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(n1.PrimaryConflist)
	if err != nil {
		return "", err
	}
	last, err := c.LastLogLine("crio."+n1.Name, "Updated default CNI network name")
	if err != nil {
		return "", err
	}
	if last.Before(fi.ModTime()) {
		return "", fmt.Errorf("crio last loaded its CNI networks at %v, before %s changed at %v", last, n1.PrimaryConflist, fi.ModTime())
	}
	return string(b), nil
}

// readinessMonitor samples the Node's Ready condition every second for the
// whole run. A test that makes the node NotReady on purpose says so
// (expectNotReady): its samples are counted apart.
type readinessMonitor struct {
	mu       sync.Mutex
	samples  int
	notReady []string // times and reasons of samples that were not Ready
	expected string   // why the node may be NotReady now ("": it may not)
	excused  int      // samples not Ready while expected
	done     chan struct{}
	wg       sync.WaitGroup
}

// expectNotReady excuses the samples that are not Ready until end is
// called, for the reason why (a test's fault).
func (r *readinessMonitor) expectNotReady(why string) (end func()) {
	r.mu.Lock()
	r.expected = why
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.expected = ""
		r.mu.Unlock()
	}
}

func startReadinessMonitor() *readinessMonitor {
	r := &readinessMonitor{done: make(chan struct{})}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			n, err := n1.Status()
			r.mu.Lock()
			r.samples++
			switch {
			case r.expected != "" && (err != nil || !n.Ready):
				r.excused++
			case err != nil:
				r.notReady = append(r.notReady, fmt.Sprintf("%s: %v", time.Now().Format(time.TimeOnly), err))
			case !n.Ready:
				r.notReady = append(r.notReady, fmt.Sprintf("%s: NotReady", time.Now().Format(time.TimeOnly)))
			}
			r.mu.Unlock()
			select {
			case <-r.done:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return r
}

func (r *readinessMonitor) stop() {
	close(r.done)
	r.wg.Wait()
}

func (r *readinessMonitor) report() (samples int, notReady []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.samples, append([]string(nil), r.notReady...)
}
