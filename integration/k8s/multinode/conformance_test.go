package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

// conformanceSpecs is the fixed subset of Kubernetes' own e2e suite that
// TestConformance runs in `make test-k8s`: `[sig-network] ...
// [Conformance]` specs of v1.37.2 (47 in all) that move packets between
// pods, nodes and Services across the two nodes and need no image but
// agnhost (and pause), and the cluster's DNS (CoreDNS, needDNS): the
// Services specs that check reachability with jig.CheckServiceReachability
// dial the Service by its name, and an ExternalName Service is resolved
// with nslookup. conformanceMore is the rest that needs nothing else,
// mostly specs that only call the API; with PODWIRE_CONFORMANCE_FULL set
// (`make test-conformance`) TestConformance runs both. Each is the spec's
// name as `e2e.test --list-tests` prints it, without its tags: the run
// selects them by name (--ginkgo.focus) among the specs labelled
// Conformance (--ginkgo.label-filter).
//
// Not run: the 8 DNS specs, whose probes run dig in agnhost and in the
// glibc-dns-testing image (neither is built here: agnhost's image holds
// the tools of the Services specs only); and, because it also fails
// without podwire in the chain, "[sig-network] HostPort validates that
// there is no conflict between pods with same hostPort but different
// hostIP and protocol". Its first check, from a host-network pod, `curl
// --interface NODE_IP http://127.0.0.1:HOSTPORT` to the pod whose hostPort
// is bound to hostIP 127.0.0.1, is refused on this cluster with podwire
// chained and equally with podwire uninstalled
// (PODWIRE_CONFORMANCE_NO_PODWIRE=1, chain flannel then portmap; run of
// 2026-11-24: 8 of the 9 specs then passed, HostPort failed with "Can not
// connect from e2e-host-exec to pod(pod1) to serverIP: 127.0.0.1" five
// times, as with podwire): portmap's hostIP 127.0.0.1 inside a node's
// network namespace, not podwire.
var conformanceSpecs = []string{
	// A netexec pod per node; a test pod (and a host-network pod for
	// node-pod) dials each over HTTP and UDP: pod to pod within and across
	// nodes, node to pod.
	"[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http",
	"[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: udp",
	"[sig-network] Networking Granular Checks: Pods should function for node-pod communication: http",
	"[sig-network] Networking Granular Checks: Pods should function for node-pod communication: udp",
	// A ClusterIP Service with TCP and UDP on one port, through
	// kube-proxy's nftables DNAT, as its endpoints change.
	"[sig-network] Services should serve endpoints on same port and different protocols",
	// The apiserver's proxy (in node 1's netns) to pods and Services on
	// either node.
	"[sig-network] Proxy version v1 A set of valid responses are returned for both pod and service Proxy",
	"[sig-network] Proxy version v1 A set of valid responses are returned for both pod and service ProxyWithPath",
	"[sig-network] Proxy version v1 should proxy through a service and a pod",
	// An exec pod dials the Service by its name (CoreDNS through
	// kube-proxy), by its ClusterIP and, for NodePort, every node's
	// addresses; with the type changed, an ExternalName Service resolves
	// to another Service's name.
	"[sig-network] Services should serve a basic endpoint from pods",
	"[sig-network] Services should serve multiport endpoints from pods",
	"[sig-network] Services should be able to create a functioning NodePort service",
	"[sig-network] Services should be able to change the type from ClusterIP to ExternalName",
	"[sig-network] Services should be able to change the type from ExternalName to ClusterIP",
	"[sig-network] Services should be able to change the type from ExternalName to NodePort",
	"[sig-network] Services should be able to change the type from NodePort to ExternalName",
}

// conformanceMore is what PODWIRE_CONFORMANCE_FULL adds to
// conformanceSpecs: every other `[sig-network] [Conformance]` spec but
// those above that are not run.
var conformanceMore = []string{
	// ClientIP session affinity through kube-proxy, switched on and off,
	// from an exec pod with curl.
	"[sig-network] Services should have session affinity work for service with type clusterIP",
	"[sig-network] Services should have session affinity work for NodePort service",
	"[sig-network] Services should be able to switch session affinity for service with type clusterIP",
	"[sig-network] Services should be able to switch session affinity for NodePort service",
	// The API only: objects created, listed, watched, mirrored and deleted.
	"[sig-network] API Server should have Endpoints and EndpointSlices pointing to API Server",
	"[sig-network] API Server should provide secure master service",
	"[sig-network] EndpointSlice should create Endpoints and EndpointSlices for Pods matching a Service",
	"[sig-network] EndpointSlice should create and delete EndpointSlices for a Service with a selector that matches no pods",
	"[sig-network] EndpointSlice should support a Service with multiple endpoint IPs specified in multiple EndpointSlices",
	"[sig-network] EndpointSlice should support a Service with multiple ports specified in multiple EndpointSlices",
	"[sig-network] EndpointSlice should support creating EndpointSlice API operations",
	"[sig-network] EndpointSliceMirroring should mirror a custom Endpoints resource through create update and delete",
	"[sig-network] Endpoints should test the lifecycle of an Endpoint",
	"[sig-network] EndpointsController should create Endpoints for Pods matching a Service",
	"[sig-network] EndpointsController should create and delete Endpoints for a Service with a selector that matches no pods",
	"[sig-network] Ingress API should support creating Ingress API operations",
	"[sig-network] IngressClass API should support creating IngressClass API operations",
	"[sig-network] Service endpoints latency should not be very high",
	"[sig-network] ServiceCIDR and IPAddress API should support IPAddress API operations",
	"[sig-network] ServiceCIDR and IPAddress API should support ServiceCIDR API operations",
	"[sig-network] Services should complete a service status lifecycle",
	"[sig-network] Services should delete a collection of services",
	"[sig-network] Services should find a service from listing all namespaces",
}

// TestConformance runs conformanceSpecs of Kubernetes' e2e suite
// (PODWIRE_E2E, the e2e.test of scripts/e2e-build.sh, built from the same
// v1.37.2 tree as the cluster) against the cluster with podwire chained
// after flannel. The images the specs use are agnhost (built from
// test/images/agnhost) and pause (the cluster's own), pushed to the run's
// registry under the names e2e.test asks for (--list-images) once its
// registries are remapped there with KUBE_TEST_REPO_LIST; the cluster's
// DNS is CoreDNS (needDNS). e2e.test runs in
// node 1's netns as kubectl does; its log, JUnit and JSON reports are in
// the run's conformance directory. It prints each spec's state and time
// and the number of specs run and passed, and fails if one did not pass,
// or if the suite ran another number of specs than listed. With
// PODWIRE_CONFORMANCE_FULL set it runs conformanceMore too. With
// PODWIRE_CONFORMANCE_NO_PODWIRE set it is the control: the same specs
// with podwire uninstalled (withoutPodwire), to tell whether a failure is
// podwire's.
func TestConformance(t *testing.T) {
	needCluster(t)
	e2eBin := os.Getenv("PODWIRE_E2E")
	if e2eBin == "" {
		t.Fatal("needs PODWIRE_E2E, the e2e.test of scripts/e2e-build.sh: run it with make test-k8s")
	}
	specs, timeout := conformanceSpecs, 8*time.Minute
	if os.Getenv("PODWIRE_CONFORMANCE_FULL") != "" {
		specs, timeout = append(slices.Clone(conformanceSpecs), conformanceMore...), 25*time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dir := filepath.Join(c.Dir, "conformance")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	repoList := filepath.Join(dir, "repo-list.yaml")
	if err := cluster.WriteE2ERepoList(repoList); err != nil {
		t.Fatal(err)
	}
	pushE2EImages(ctx, t, e2eBin, repoList)
	needDNS(t)
	if os.Getenv("PODWIRE_CONFORMANCE_NO_PODWIRE") != "" {
		withoutPodwire(ctx, t)
	}

	focus := make([]string, len(specs))
	for i, s := range specs {
		focus[i] = regexp.QuoteMeta(s)
	}
	report := filepath.Join(dir, "report.json")
	cmd, err := c.E2ECommand(ctx, e2eBin, repoList,
		"--provider=skeleton", "--report-dir="+dir, "--disable-log-dump",
		"--ginkgo.label-filter=Conformance", "--ginkgo.focus="+strings.Join(focus, "|"),
		"--ginkgo.json-report="+report, "--ginkgo.no-color", fmt.Sprintf("--ginkgo.timeout=%v", timeout-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "e2e.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	runErr := cmd.Run()
	elapsed := time.Since(start)

	ran, err := readGinkgoReport(report)
	if err != nil {
		t.Fatalf("e2e.test (%v) wrote no report: %v\n%s", runErr, err, tail(logPath, 60))
	}
	run, passed := 0, 0
	for _, s := range ran {
		if s.State == "skipped" || s.State == "pending" {
			continue // the thousands of specs outside the subset
		}
		run++
		fmt.Printf("conformance: %-7s %5.1fs  %s\n", s.State, s.RunTime.Seconds(), s.name())
		if s.State == "passed" {
			passed++
		} else {
			t.Errorf("%s: %s\n%s", s.name(), s.State, s.Failure.Message)
		}
	}
	fmt.Printf("conformance: %d of %d specs run, %d passed, in %.1fs\n", run, len(specs), passed, elapsed.Seconds())
	if run != len(specs) {
		t.Errorf("e2e.test ran %d specs, want the %d listed (a name no longer matches?)", run, len(specs))
	}
	if runErr != nil || t.Failed() {
		t.Errorf("e2e.test: %v; the log's end (all of it in %s):\n%s", runErr, logPath, tail(logPath, 60))
	}
}

// withoutPodwire is the control run's set-up (PODWIRE_CONFORMANCE_NO_PODWIRE
// set: whether a spec that fails also fails without podwire): `helm
// uninstall` of podwire, until no node's containerd has podwire in its
// chain (flannel, portmap only); at the test's end podwire is installed
// again as TestMain installed it, for the tests after this one.
func withoutPodwire(ctx context.Context, t *testing.T) {
	t.Helper()
	if out, err := c.Helm(ctx, helmBin, "uninstall", release, "--namespace", releaseNS, "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm uninstall: %v: %s", err, out)
	}
	for _, n := range c.Nodes {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		for {
			conf, err := n.CNIConfig(wctx)
			if err == nil && strings.Contains(conf, `\"type\":\"flannel\"`) && !strings.Contains(conf, `\"type\":\"podwire\"`) {
				break
			}
			if wctx.Err() != nil {
				cancel()
				t.Fatalf("%s: containerd still has podwire in its chain after helm uninstall: %v\n%s", n.Name, err, conf)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
	}
	fmt.Println("conformance: control run, podwire uninstalled: every node's chain is flannel, portmap")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := helm(ctx, "install", podwirePinned); err != nil {
			t.Error(err)
			return
		}
		for _, n := range c.Nodes {
			if err := waitChain(ctx, n); err != nil {
				t.Error(err)
			}
		}
	})
}

// pushE2EImages asks e2e.test which images it uses, under the repo list's
// names, and pushes to the run's registry agnhost (the binary of
// scripts/k8s-build.sh) under each of its agnhost names (the current one
// and the previous release's), and pause.
func pushE2EImages(ctx context.Context, t *testing.T, e2eBin, repoList string) {
	t.Helper()
	cmd, err := c.E2ECommand(ctx, e2eBin, repoList, "--list-images")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("e2e.test --list-images: %v", err)
	}
	builds := map[string]func() (v1.Image, error){
		"e2e-test-images/agnhost:": func() (v1.Image, error) { return cluster.E2EAgnhostImage(os.Getenv("PODWIRE_K8S_BIN")) },
		"k8s/pause:":               func() (v1.Image, error) { return cluster.PauseRegistryImage(c.Dir) },
	}
	pushed := map[string]bool{}
	for _, line := range strings.Fields(string(out)) {
		repoTag, ok := strings.CutPrefix(line, cluster.RegistryHost+"/")
		if !ok {
			continue
		}
		for prefix, build := range builds {
			if !strings.HasPrefix(repoTag, prefix) {
				continue
			}
			img, err := build()
			if err != nil {
				t.Fatalf("image %s: %v", repoTag, err)
			}
			ref, err := c.Push(ctx, img, repoTag)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("registry: pushed %s (for e2e.test)\n", ref)
			pushed[prefix] = true
		}
	}
	for prefix := range builds {
		if !pushed[prefix] {
			t.Fatalf("e2e.test --list-images names no %s/%s... image:\n%s", cluster.RegistryHost, prefix, out)
		}
	}
}

// ginkgoSpec is the part of a spec's entry in a Ginkgo v2 JSON report
// (--ginkgo.json-report: []types.Report) that the test reads.
type ginkgoSpec struct {
	ContainerHierarchyTexts []string
	LeafNodeText            string
	LeafNodeType            string
	State                   string
	RunTime                 time.Duration
	Failure                 struct{ Message string }
}

func (s ginkgoSpec) name() string {
	return strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " ")
}

// readGinkgoReport returns the It specs of the report at path.
func readGinkgoReport(path string) ([]ginkgoSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []struct{ SpecReports []ginkgoSpec }
	if err := json.Unmarshal(b, &reports); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var specs []ginkgoSpec
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType == "It" {
				specs = append(specs, s)
			}
		}
	}
	return specs, nil
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
