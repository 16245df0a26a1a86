package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/podwire/podwire/integration/k8s/cluster"
	pwagent "github.com/podwire/podwire/pkg/agent"
)

// The fake fleet's addresses. They exist only as data in the apiserver and
// as routes inside the real nodes' namespaces.
var (
	// fakePodCIDRs holds a /24 per fake Node, outside cluster.ClusterCIDR.
	fakePodCIDRs = netip.MustParsePrefix("10.128.0.0/11")
	// routable is forwarding.routablePrefixes of the agents' entry: every
	// tenth fake Node publishes a /28 of it.
	routable = netip.MustParsePrefix("198.18.0.0/15")
)

// kwokLabel selects the Nodes kwok keeps alive; kwokTaint keeps every
// DaemonSet and pod that does not tolerate it off them.
const (
	kwokLabel = "type"
	kwokValue = "kwok"
	kwokTaint = "kwok.x-k8s.io/node"
	// podsNS holds the fake pods.
	podsNS = "scale"
	// agentNS and agentSA are deploy/'s.
	agentNS = "podwire-system"
	agentSA = "podwire-agent"
)

// fakeName is the name of fake Node i.
func fakeName(i int) string { return fmt.Sprintf("kwok-%05d", i) }

// publishes reports whether fake Node i publishes routes: one in ten.
func publishes(i int) bool { return i%10 == 0 }

// routeOf is what fake Node i publishes at generation gen: a /28 of
// routable, a new one at each generation. Routable's /15 holds 8,192 of
// them: 512 publishing Nodes (5,120 Nodes) at 16 generations.
func routeOf(i, gen int) netip.Prefix {
	k := uint32(i/10 + gen*512)
	a := routable.Addr().As4()
	base := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v := base + k*16
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), 28)
}

// fakeNode is fake Node i as a kubelet would register it: a pod CIDR, an
// InternalIP and a Hostname, capacity, kwok's label, annotation and taint,
// and, when it publishes, podwire.io/routes at generation 0.
func fakeNode(i int) *corev1.Node {
	a := fakePodCIDRs.Addr().As4()
	cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{a[0], a[1] + byte(i>>8), byte(i), 0}), 24).String()
	ip := fmt.Sprintf("172.16.%d.%d", i>>8, i&255)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: fakeName(i), Labels: map[string]string{kwokLabel: kwokValue, "kubernetes.io/hostname": fakeName(i)},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
		Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr},
			Taints: []corev1.Taint{{Key: kwokTaint, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: fakeName(i)}},
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
				corev1.ResourcePods: resource.MustParse("110")},
		},
	}
	n.Status.Allocatable = n.Status.Capacity
	// Ready from the start, as a kubelet registers a healthy node: kwok's
	// node-initialize stage then has nothing to write, and the node
	// lifecycle controller no not-ready taint to put on and take off
	// each new Node (both Node writes every agent would receive while
	// the bench measures the fleet at rest).
	now := metav1.Now()
	for _, c := range []struct {
		t corev1.NodeConditionType
		s corev1.ConditionStatus
	}{{corev1.NodeReady, corev1.ConditionTrue}, {corev1.NodeMemoryPressure, corev1.ConditionFalse},
		{corev1.NodeDiskPressure, corev1.ConditionFalse}, {corev1.NodePIDPressure, corev1.ConditionFalse},
		{corev1.NodeNetworkUnavailable, corev1.ConditionFalse}} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c.t, Status: c.s,
			LastHeartbeatTime: now, LastTransitionTime: now, Reason: "KwokFleet"})
	}
	n.Status.Phase = corev1.NodeRunning
	if publishes(i) {
		n.Annotations["podwire.io/routes"] = routeOf(i, 0).String()
	}
	return n
}

// clients are the bench's own API clients (admin, from the first node's
// netns): protobuf for the built-in kinds, the dynamic client for
// ClaimPools.
type clients struct {
	kube *kubernetes.Clientset
	dyn  *dynamic.DynamicClient
}

func newClients() (*clients, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig)
	if err != nil {
		return nil, err
	}
	tr, ok := cluster.HTTPClientIn(c.Nodes[0].NetNS).Transport.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("HTTPClientIn's transport is a %T", cluster.HTTPClientIn(c.Nodes[0].NetNS).Transport)
	}
	cfg.Dial = tr.DialContext
	cfg.QPS, cfg.Burst, cfg.Timeout = 2000, 4000, 30*time.Second
	cfg.UserAgent = "podwire-bench-scale"
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	pb := rest.CopyConfig(cfg)
	pb.ContentType = runtime.ContentTypeProtobuf
	kube, err := kubernetes.NewForConfig(pb)
	if err != nil {
		return nil, err
	}
	return &clients{kube: kube, dyn: dyn}, nil
}

// parallel runs f(i) for i in [from, to) on workers goroutines and
// returns the first error.
func parallel(from, to, workers int, f func(i int) error) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// addNodes creates fake Nodes [from, to), each with its PodwireNode, as
// its agent would write it once the Node exists.
func (cl *clients) addNodes(ctx context.Context, from, to int) error {
	return parallel(from, to, 16, func(i int) error {
		n := fakeNode(i)
		_, err := cl.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return cl.writeMirror(ctx, n)
	})
}

var podwireNodes = schema.GroupVersionResource{Group: "podwire.io", Version: "v1alpha1", Resource: "podwirenodes"}

// writeMirror writes Node n's PodwireNode with the fingerprint of n's data
// (agent.NodeFingerprint), as n's agent would: the other agents read a
// Node only when its PodwireNode announces a change.
func (cl *clients) writeMirror(ctx context.Context, n *corev1.Node) error {
	r := cl.dyn.Resource(podwireNodes)
	spec := map[string]any{"fingerprint": pwagent.NodeFingerprint(n)}
	for {
		cur, err := r.Get(ctx, n.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "podwire.io/v1alpha1", "kind": "PodwireNode",
				"metadata": map[string]any{"name": n.Name}, "spec": spec}}
			if _, err = r.Create(ctx, u, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
				continue
			}
			return err
		}
		if err != nil {
			return err
		}
		cur.Object["spec"] = spec
		if _, err = r.Update(ctx, cur, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			continue
		}
		return err
	}
}

// addPods creates perNode pods bound to each fake Node of [from, to),
// tolerating kwok's taint: kwok's pod-ready stage makes them Running.
func (cl *clients) addPods(ctx context.Context, from, to, perNode int) error {
	return parallel(from*perNode, to*perNode, 16, func(k int) error {
		i, j := k/perNode, k%perNode
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", fakeName(i), j), Namespace: podsNS, Labels: map[string]string{"app": "scale"}},
			Spec: corev1.PodSpec{
				NodeName: fakeName(i), AutomountServiceAccountToken: new(bool),
				Tolerations: []corev1.Toleration{{Key: kwokTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Containers:  []corev1.Container{{Name: "main", Image: "registry.invalid/fake:1"}},
			},
		}
		_, err := cl.kube.CoreV1().Pods(podsNS).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	})
}

var claimPools = schema.GroupVersionResource{Group: "podwire.io", Version: "v1alpha1", Resource: "claimpools"}

// writeClaims makes the ClaimPool routes hold, for every publishing fake
// Node below n, its routes at the generations gens[i] (0 when absent): the
// claims that the Node's forwarding pods would have made at their ADDs,
// without which no agent routes a Node's prefix.
func (cl *clients) writeClaims(ctx context.Context, n int, gens map[int][]int) error {
	entries := []any{}
	since := time.Now().UTC().Format(time.RFC3339)
	for i := 0; i < n; i++ {
		if !publishes(i) {
			continue
		}
		gs := gens[i]
		if len(gs) == 0 {
			gs = []int{0}
		}
		for _, g := range gs {
			entries = append(entries, map[string]any{"kind": "route", "value": routeOf(i, g).String(),
				"namespace": "nf-scale", "pod": fmt.Sprintf("router-%s-%d", fakeName(i), g), "uid": fmt.Sprintf("uid-%s-%d", fakeName(i), g),
				"node": fakeName(i), "attachment": fmt.Sprintf("scale-%s-%d/net1", fakeName(i), g), "since": since})
		}
	}
	pools := cl.dyn.Resource(claimPools)
	for {
		cur, err := pools.Get(ctx, "routes", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "podwire.io/v1alpha1", "kind": "ClaimPool",
				"metadata": map[string]any{"name": "routes"}, "spec": map[string]any{"entries": entries}}}
			if _, err = pools.Create(ctx, u, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
				continue
			}
			return err
		}
		if err != nil {
			return err
		}
		cur.Object["spec"] = map[string]any{"entries": entries}
		if _, err = pools.Update(ctx, cur, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			continue
		}
		return err
	}
}

// waitReady waits until kwok has made every fake Node below n Ready (its
// node-initialize stage: a status write per Node, which every agent
// receives), so that what is measured next is the fleet at rest.
func (cl *clients) waitReady(ctx context.Context, n int, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	for {
		ready, cont := 0, ""
		for {
			l, err := cl.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: kwokLabel + "=" + kwokValue, Limit: 1000, Continue: cont})
			if err != nil {
				return err
			}
			for _, nd := range l.Items {
				for _, c := range nd.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if cont = l.Continue; cont == "" {
				break
			}
		}
		if ready >= n {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%d of %d fake Nodes Ready after %v", ready, n, timeout)
		}
		time.Sleep(5 * time.Second)
	}
}

// setRoute patches fake Node i's podwire.io/routes to its route at gen,
// then its PodwireNode, as its agent would.
func (cl *clients) setRoute(ctx context.Context, i, gen int) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"podwire.io/routes": routeOf(i, gen).String()}}})
	n, err := cl.kube.CoreV1().Nodes().Patch(ctx, fakeName(i), types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return err
	}
	return cl.writeMirror(ctx, n)
}

// startKwok runs kwok's controller in the first node's namespaces (where
// the admin kubeconfig reaches the apiserver), managing the Nodes labelled
// kwokLabel with the release's stages (scripts/kwok-build.sh); the
// returned stop ends it by PID. Leases of 120 s are renewed every 30 s,
// inside the node lifecycle controller's grace period, a third of the
// Lease writes of a kubelet's 40 s (renewed every 10 s): they load the
// apiserver and etcd of a small machine in proportion to the Nodes, and
// podwire reads no Lease.
func startKwok(t *testing.T) func() {
	dir := env["PODWIRE_KWOK"]
	log, err := os.Create(filepath.Join(c.Dir, "logs", "kwok.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := c.Nodes[0].Command(context.Background(), filepath.Join(dir, "kwok"),
		"--kubeconfig="+c.AdminKubeconfig, "--config="+filepath.Join(dir, "stages.yaml"),
		"--manage-all-nodes=false", "--manage-nodes-with-label-selector="+kwokLabel+"="+kwokValue,
		"--cidr=10.192.0.0/10", "--node-ip=172.31.255.254", "--node-lease-duration-seconds=120",
		// A line per patch at INFO: tens of thousands during the fleet's growth.
		"-v=WARN")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() { endProcess(cmd, 10*time.Second); log.Close() }
}

// endProcess ends cmd's process (by its PID) with SIGTERM, then SIGKILL
// after grace, and reaps it.
func endProcess(cmd *exec.Cmd, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// installAgentRBAC applies deploy/'s namespace, CRD and RBAC (the
// admission policies pin a token to its pod's node, which a token made for
// a process outside a pod cannot name) and makes a token of the agent's
// ServiceAccount.
func installAgentRBAC(ctx context.Context) (token string, err error) {
	for _, f := range []string{"00-namespace.yaml", "05-crd.yaml", "10-rbac.yaml"} {
		if out, err := c.Kubectl(ctx, "", "apply", "-f", filepath.Join("..", "..", "..", "deploy", f)); err != nil {
			return "", fmt.Errorf("kubectl apply %s: %w: %s", f, err, out)
		}
	}
	if out, err := c.Kubectl(ctx, "", "wait", "--for=condition=Established", "--timeout=60s", "crd/claimpools.podwire.io", "crd/podwirenodes.podwire.io", "crd/podwirenodestatuses.podwire.io"); err != nil {
		return "", fmt.Errorf("podwire's CRDs: %w: %s", err, out)
	}
	if err := c.WaitServiceAccount(ctx, agentNS); err != nil {
		return "", err
	}
	out, err := c.Kubectl(ctx, "", "-n", agentNS, "create", "token", agentSA, "--duration=4h")
	if err != nil {
		return "", fmt.Errorf("token of %s/%s: %w: %s", agentNS, agentSA, err, out)
	}
	return strings.TrimSpace(out), nil
}

// writeAgentKubeconfig writes a kubeconfig for the agent's ServiceAccount
// token at server (the relay in front of the apiserver).
func writeAgentKubeconfig(path, server, token string) error {
	ca, err := os.ReadFile(filepath.Join(c.Dir, "pki", "ca.crt"))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["scale"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[agentSA] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["scale"] = &clientcmdapi.Context{Cluster: "scale", AuthInfo: agentSA}
	cfg.CurrentContext = "scale"
	return clientcmd.WriteToFile(*cfg, path)
}
