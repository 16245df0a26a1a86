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
	"sync"
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
// with nslookup. They are listed longest first (conformanceShards).
// conformanceMore is the rest, the DNS specs and specs that
// only call the API; with PODWIRE_CONFORMANCE_FULL set (`make
// test-conformance`) TestConformance runs both. Each is the spec's name as
// `e2e.test --list-tests` prints it, without its tags: the run selects it
// by name (--ginkgo.focus) among the specs labelled Conformance
// (--ginkgo.label-filter).
//
// Not run, because it also fails without podwire in the chain: "[sig-network]
// HostPort validates that there is no conflict between pods with same
// hostPort but different hostIP and protocol". Its first check, from a
// host-network pod, `curl --interface NODE_IP http://127.0.0.1:HOSTPORT` to
// the pod whose hostPort is bound to hostIP 127.0.0.1, is refused on this
// cluster with podwire chained and equally with podwire uninstalled
// (PODWIRE_CONFORMANCE_NO_PODWIRE=1, chain flannel then portmap: HostPort
// fails with "Can not connect from e2e-host-exec to pod(pod1) to serverIP:
// 127.0.0.1", as with podwire; docs/testing.md has the control run):
// portmap's hostIP 127.0.0.1 inside a node's network namespace, not
// podwire.
var conformanceSpecs = []string{
	// A ClusterIP Service with TCP and UDP on one port, through
	// kube-proxy's nftables DNAT, as its endpoints change.
	"[sig-network] Services should serve endpoints on same port and different protocols",
	// A netexec pod per node; a test pod (and a host-network pod for
	// node-pod) dials each over HTTP and UDP: pod to pod within and across
	// nodes, node to pod.
	"[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http",
	"[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: udp",
	"[sig-network] Networking Granular Checks: Pods should function for node-pod communication: http",
	"[sig-network] Networking Granular Checks: Pods should function for node-pod communication: udp",
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
	// The apiserver's proxy (in node 1's netns) to pods and Services on
	// either node.
	"[sig-network] Proxy version v1 A set of valid responses are returned for both pod and service Proxy",
	"[sig-network] Proxy version v1 A set of valid responses are returned for both pod and service ProxyWithPath",
	"[sig-network] Proxy version v1 should proxy through a service and a pod",
}

// conformanceMore is what PODWIRE_CONFORMANCE_FULL adds to
// conformanceSpecs: every other `[sig-network] [Conformance]` spec but
// HostPort.
var conformanceMore = []string{
	// A pod whose probe containers, in agnhost's image and in
	// glibc-dns-testing's (cluster.E2EGlibcDNSImage), resolve names with
	// dig over UDP and TCP through the search path, and read /etc/hosts
	// with getent, every second, writing what resolved to files that the
	// spec reads through the apiserver's proxy to the pod: cluster and
	// Service names, headless Services and their pods' hostnames and
	// subdomains, PTR records of a ClusterIP, an ExternalName's CNAME as it
	// changes, and a pod's own dnsConfig.
	"[sig-network] DNS should provide DNS for the cluster",
	"[sig-network] DNS should provide /etc/hosts entries for the cluster",
	"[sig-network] DNS should provide DNS for services",
	"[sig-network] DNS should resolve DNS of partial qualified names for services",
	"[sig-network] DNS should provide DNS for pods for Hostname",
	"[sig-network] DNS should provide DNS for pods for Subdomain",
	"[sig-network] DNS should provide DNS for ExternalName services",
	"[sig-network] DNS should support configurable pod DNS nameservers",
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

// conformanceProcs is how many e2e.test processes TestConformance runs at
// once, each a share of the specs (conformanceShards): the specs spend most
// of their time waiting for pods and polling them, and upstream runs the
// non-[Serial] ones of this list in parallel too (none of them is
// [Serial]).
const conformanceProcs = 3

// conformanceShards deals specs to n processes in a snake (0, 1, ..., n-1,
// n-1, ..., 0, 0, 1, ...), so that with the specs listed longest first
// each share takes about as long. One process per share, not per spec:
// each e2e.test process spends seconds of CPU starting up and in its
// suite's set-up.
func conformanceShards(specs []string, n int) [][]string {
	shards := make([][]string, n)
	for i, s := range specs {
		k := i % (2 * n)
		if k >= n {
			k = 2*n - 1 - k
		}
		shards[k] = append(shards[k], s)
	}
	return shards
}

// TestConformance runs conformanceSpecs of Kubernetes' e2e suite
// (PODWIRE_E2E, the e2e.test of scripts/e2e-build.sh, built from the same
// v1.37.2 tree as the cluster) against the cluster with podwire chained
// after flannel. The images the specs use are agnhost (built from
// test/images/agnhost), glibc-dns-testing (the DNS specs' second prober)
// and pause (the cluster's own), pushed to the run's registry under the
// names e2e.test asks for (--list-images) once its registries are remapped
// there with KUBE_TEST_REPO_LIST; the cluster's DNS is CoreDNS (needDNS).
// The specs are dealt to conformanceProcs e2e.test processes run at once
// (conformanceShards, runShard), in node 1's netns as kubectl runs; their
// logs, JUnit and JSON reports are in the run's conformance directory, one
// directory per process. It prints each spec's state and time as its
// process ends and the number of specs run and passed, and fails if one
// did not pass, or if a process ran another number of specs than dealt. With PODWIRE_CONFORMANCE_FULL set it runs
// conformanceMore too. With PODWIRE_CONFORMANCE_NO_PODWIRE set it is the
// control: the same specs with podwire uninstalled (withoutPodwire), to
// tell whether a failure is podwire's.
func TestConformance(t *testing.T) {
	needCluster(t)
	e2eBin := os.Getenv("PODWIRE_E2E")
	if e2eBin == "" {
		t.Fatal("needs PODWIRE_E2E, the e2e.test of scripts/e2e-build.sh: run it with make test-k8s")
	}
	specs, timeout := conformanceSpecs, 6*time.Minute
	if os.Getenv("PODWIRE_CONFORMANCE_FULL") != "" {
		specs, timeout = append(slices.Clone(conformanceSpecs), conformanceMore...), 20*time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if e2eImages.done == nil {
		t.Fatal("setUp did not push the specs' images (startE2EImages)")
	}
	<-e2eImages.done
	if e2eImages.err != nil {
		t.Fatal(e2eImages.err)
	}
	dir, repoList := filepath.Dir(e2eImages.repoList), e2eImages.repoList
	needDNS(t)
	if os.Getenv("PODWIRE_CONFORMANCE_NO_PODWIRE") != "" {
		withoutPodwire(ctx, t)
	}

	start := time.Now()
	shards := conformanceShards(specs, conformanceProcs)
	results := make([]shardResult, len(shards))
	var wg sync.WaitGroup
	var mu sync.Mutex // one share's lines at a time
	for i, shard := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := runShard(ctx, e2eBin, repoList, filepath.Join(dir, fmt.Sprint(i+1)), shard)
			results[i] = r
			mu.Lock()
			defer mu.Unlock()
			for _, s := range r.ran {
				fmt.Printf("conformance: %-7s %5.1fs  %s\n", s.State, s.RunTime.Seconds(), s.name())
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	run, passed := 0, 0
	for i, r := range results {
		run += len(r.ran)
		ok := len(r.ran) == len(shards[i])
		for _, s := range r.ran {
			if s.State == "passed" {
				passed++
				continue
			}
			ok = false
			t.Errorf("%s: %s (log: %s)\n%s", s.name(), s.State, r.log, s.Failure.Message)
		}
		// A process whose specs all passed and that still failed (its
		// suite's set-up or clean-up) fails the test too.
		if len(r.ran) != len(shards[i]) || (ok && r.err != nil) {
			t.Errorf("e2e.test of share %d ran %d specs, want %d: %v; the log's end (all of it in %s):\n%s",
				i+1, len(r.ran), len(shards[i]), r.err, r.log, tail(r.log, 40))
		}
	}
	fmt.Printf("conformance: %d of %d specs run, %d passed, in %.1fs (%d e2e.test processes at once)\n",
		run, len(specs), passed, elapsed.Seconds(), conformanceProcs)
}

// shardResult is one e2e.test process's run: the specs it ran, its error,
// and its log's path.
type shardResult struct {
	ran []ginkgoSpec
	err error
	log string
}

// runShard runs the conformance specs named in specs in one e2e.test
// process, which writes its log and reports in dir. Each name is focused
// followed by its tags (or its end), so that a name which begins another's
// ("... service Proxy", "... service ProxyWithPath") selects only its own.
func runShard(ctx context.Context, e2eBin, repoList, dir string, specs []string) shardResult {
	r := shardResult{log: filepath.Join(dir, "e2e.log")}
	if r.err = os.MkdirAll(dir, 0o755); r.err != nil {
		return r
	}
	focus := make([]string, len(specs))
	for i, s := range specs {
		focus[i] = regexp.QuoteMeta(s) + `( \[|$)`
	}
	deadline, _ := ctx.Deadline()
	report := filepath.Join(dir, "report.json")
	cmd, err := c.E2ECommand(ctx, e2eBin, repoList,
		"--provider=skeleton", "--report-dir="+dir, "--disable-log-dump",
		"--ginkgo.label-filter=Conformance", "--ginkgo.focus="+strings.Join(focus, "|"),
		"--ginkgo.json-report="+report, "--ginkgo.no-color",
		fmt.Sprintf("--ginkgo.timeout=%v", max(time.Until(deadline).Round(time.Second)-30*time.Second, time.Minute)))
	if err != nil {
		r.err = err
		return r
	}
	logFile, err := os.Create(r.log)
	if err != nil {
		r.err = err
		return r
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	runErr := cmd.Run()
	ran, err := readGinkgoReport(report)
	if err != nil {
		r.err = fmt.Errorf("e2e.test (%v) wrote no report: %v", runErr, err)
		return r
	}
	for _, s := range ran {
		if s.State != "skipped" && s.State != "pending" { // the thousands of specs not focused
			r.ran = append(r.ran, s)
		}
	}
	r.err = runErr
	return r
}

// withoutPodwire is the control run's set-up (PODWIRE_CONFORMANCE_NO_PODWIRE
// set: whether a spec that fails also fails without podwire): `helm
// uninstall` of podwire, until no node's containerd has podwire in its
// chain (flannel, portmap only); at the test's end podwire is installed
// again as TestMain installed it, for the tests after this one.
func withoutPodwire(ctx context.Context, t *testing.T) {
	t.Helper()
	// An uninstall rightly keeps podwire in the chain while pods it wired
	// run: the cluster's DNS (two pods, when a test installed it) goes
	// first and comes back without podwire, and again with it after; the
	// DELs of earlier pods are waited for (the API drops a pod before the
	// kubelet's teardown runs them).
	hadDNS := strings.Contains(kubectl(t, "", "-n", "kube-system", "get", "deployment", "--ignore-not-found", "-o", "name"), "coredns")
	dropDNS := func() {
		kubectl(t, "", "-n", "kube-system", "delete", "deployment", "coredns", "--ignore-not-found",
			"--cascade=foreground", "--wait=true", "--timeout=120s")
	}
	againDNS := func() {
		if hadDNS {
			dnsOnce = sync.Once{} // installed as needDNS installed it
			needDNS(t)
		}
	}
	dropDNS()
	// TestStartupTaint's early Deployment, made before podwire's install,
	// runs until that test ends: its pod goes while podwire is away and
	// comes back after.
	hadEarly := strings.Contains(kubectl(t, "", "-n", "default", "get", "deployment", "--ignore-not-found", "-o", "name"), "deployment.apps/early")
	scaleEarly := func(replicas string) {
		if hadEarly {
			kubectl(t, "", "-n", "default", "scale", "deployment", "early", "--replicas="+replicas)
		}
	}
	scaleEarly("0")
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	for hadEarly {
		phases, err := podPhases(wctx, "default", "app=early")
		if err == nil && len(phases) == 0 {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("the early Deployment's pod is still there: %v %v", phases, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, n := range c.Nodes {
		waitNoAttachments(t, wctx, n)
	}
	wcancel()
	if out, err := c.Helm(ctx, helmBin, "uninstall", release, "--namespace", releaseNS, "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm uninstall: %v: %s", err, out)
	}
	for _, n := range c.Nodes {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
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
	fmt.Println("podwire uninstalled: every node's chain is flannel, portmap")
	againDNS()
	t.Cleanup(func() {
		if hadDNS {
			dropDNS()
		}
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
		againDNS()
		scaleEarly("1")
	})
}

// e2eImages is startE2EImages's work: the KUBE_TEST_REPO_LIST file it
// wrote, its error, and done, closed when it ended.
var e2eImages struct {
	done     chan struct{}
	repoList string
	err      error
}

// startE2EImages writes the repo list in the run's conformance directory
// and pushes the specs' images (pushE2EImages) in the background, while
// setUp installs the add-ons and podwire; TestConformance waits for it.
func startE2EImages(ctx context.Context, e2eBin string) {
	e2eImages.done = make(chan struct{})
	go func() {
		defer close(e2eImages.done)
		if e2eBin == "" {
			e2eImages.err = fmt.Errorf("needs PODWIRE_E2E, the e2e.test of scripts/e2e-build.sh: run it with make test-k8s")
			return
		}
		dir := filepath.Join(c.Dir, "conformance")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			e2eImages.err = err
			return
		}
		repoList := filepath.Join(dir, "repo-list.yaml")
		if err := cluster.WriteE2ERepoList(repoList); err != nil {
			e2eImages.err = err
			return
		}
		e2eImages.repoList, e2eImages.err = repoList, pushE2EImages(ctx, e2eBin, repoList)
	}()
}

// pushE2EImages asks e2e.test which images it uses, under the repo list's
// names, and pushes to the run's registry agnhost (the binary of
// scripts/k8s-build.sh) under each of its agnhost names (the current one
// and the previous release's), glibc-dns-testing, and pause, each image
// built once.
func pushE2EImages(ctx context.Context, e2eBin, repoList string) error {
	cmd, err := c.E2ECommand(ctx, e2eBin, repoList, "--list-images")
	if err != nil {
		return err
	}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("e2e.test --list-images: %v", err)
	}
	builds := map[string]func() (v1.Image, error){
		"e2e-test-images/agnhost:":           func() (v1.Image, error) { return cluster.E2EAgnhostImage(os.Getenv("PODWIRE_K8S_BIN")) },
		"e2e-test-images/glibc-dns-testing:": func() (v1.Image, error) { return cluster.E2EGlibcDNSImage() },
		"k8s/pause:":                         func() (v1.Image, error) { return cluster.PauseRegistryImage(c.Dir) },
	}
	built := map[string]v1.Image{} // by prefix: each image is built once, pushed under every name
	for _, line := range strings.Fields(string(out)) {
		repoTag, ok := strings.CutPrefix(line, cluster.RegistryHost+"/")
		if !ok {
			continue
		}
		for prefix, build := range builds {
			if !strings.HasPrefix(repoTag, prefix) {
				continue
			}
			img := built[prefix]
			if img == nil {
				if img, err = build(); err != nil {
					return fmt.Errorf("image %s: %v", repoTag, err)
				}
				built[prefix] = img
			}
			ref, err := c.Push(ctx, img, repoTag)
			if err != nil {
				return err
			}
			fmt.Printf("registry: pushed %s (for e2e.test)\n", ref)
		}
	}
	for prefix := range builds {
		if built[prefix] == nil {
			return fmt.Errorf("e2e.test --list-images names no %s/%s... image:\n%s", cluster.RegistryHost, prefix, out)
		}
	}
	return nil
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

// TestConformanceShards checks the deal of the specs to the processes:
// each spec once, in a snake, so that the longest ones (listed first) go
// to different processes.
func TestConformanceShards(t *testing.T) {
	specs := []string{"a", "b", "c", "d", "e", "f", "g"}
	got := conformanceShards(specs, 3)
	const want = "[[a f g] [b e] [c d]]"
	if fmt.Sprint(got) != want {
		t.Errorf("conformanceShards(%v, 3) = %v, want %v", specs, got, want)
	}
	all := append(slices.Clone(conformanceSpecs), conformanceMore...)
	n := 0
	for _, shard := range conformanceShards(all, conformanceProcs) {
		n += len(shard)
	}
	if n != len(all) {
		t.Errorf("the shares of the full set hold %d specs, want %d", n, len(all))
	}
}
