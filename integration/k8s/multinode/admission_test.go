package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// The chart's ValidatingAdmissionPolicies and their bindings.
const (
	agentNodePolicy       = "podwire-agent-node"
	namespaceLabelsPolicy = "podwire-namespace-labels"
)

// agentNodeLabel selects the nodes the agent runs on (the suite's
// nodeSelector value, set on every node before the install), so that a test
// can take the agent off one node without rolling the others.
const agentNodeLabel = "podwire-test/agent"

// guardedLabelKey is a label key of no podwire selector that the suite's
// values add to admissionPolicies.namespaceLabelKeys.
const guardedLabelKey = "podwire-test/team"

// whoami is what `kubectl auth whoami` says of a kubeconfig's user.
type whoami struct {
	Status struct {
		UserInfo struct {
			Username string              `json:"username"`
			Groups   []string            `json:"groups"`
			Extra    map[string][]string `json:"extra"`
		} `json:"userInfo"`
	} `json:"status"`
}

// asUser is kubectl run with a ServiceAccount token alone.
type asUser struct {
	name, kubeconfig, cacheDir string
}

// tokenUser writes a kubeconfig holding token and nothing else, and returns
// its user with what the apiserver authenticates the token as.
func tokenUser(t *testing.T, name, token string) (*asUser, whoami) {
	t.Helper()
	dir := t.TempDir()
	u := &asUser{name: name, kubeconfig: filepath.Join(dir, name+".kubeconfig"), cacheDir: filepath.Join(dir, "cache")}
	if err := c.WriteKubeconfig(u.kubeconfig, name, &clientcmdapi.AuthInfo{Token: token}, ""); err != nil {
		t.Fatal(err)
	}
	var who whoami
	if err := json.Unmarshal([]byte(u.must(t, "auth", "whoami", "-o", "json")), &who); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(who.Status.UserInfo.Groups, "system:masters") {
		t.Fatalf("%s is in system:masters", who.Status.UserInfo.Username)
	}
	return u, who
}

func (u *asUser) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.KubectlAs(ctx, u.kubeconfig, u.cacheDir, "", args...)
}

func (u *asUser) must(t *testing.T, args ...string) string {
	t.Helper()
	return c.MustKubectlAs(t, u.kubeconfig, u.cacheDir, "", args...)
}

// denied runs kubectl as u and fails t unless the apiserver refused it by
// policy, with a message holding every string of want.
func (u *asUser) denied(t *testing.T, what, policy string, want []string, args ...string) {
	t.Helper()
	out, err := u.run(args...)
	if err == nil {
		t.Errorf("%s could %s: %s", u.name, what, out)
		return
	}
	msg := err.Error()
	for _, w := range append([]string{"ValidatingAdmissionPolicy '" + policy + "'", "denied request"}, want...) {
		if !strings.Contains(msg, w) {
			t.Errorf("%s may not %s, but the refusal does not say %q: %v", u.name, what, w, err)
			return
		}
	}
	t.Logf("%s may not %s: %s", u.name, what, firstLine(msg[strings.Index(msg, "denied request"):]))
}

// agentToken reads, as root on node n, the ServiceAccount token the kubelet
// projected into n's podwire-agent pod (its kube-api-access volume).
func agentToken(t *testing.T, n *cluster.Node) string {
	t.Helper()
	uids := strings.Fields(kubectl(t, "", "-n", agentNS, "get", "pods", "-l", "app.kubernetes.io/name=podwire-agent",
		"--field-selector", "spec.nodeName="+n.Name+",status.phase=Running", "-o", "jsonpath={.items[*].metadata.uid}"))
	if len(uids) == 0 {
		t.Fatalf("no podwire-agent pod runs on %s", n.Name)
	}
	// The kubelet mounts the projected volume (a tmpfs) in the node's mount
	// namespace: read it there, as root on the node.
	b, err := n.Command(context.Background(), "sh", "-c",
		"cat /var/lib/kubelet/pods/"+uids[0]+"/volumes/kubernetes.io~projected/*/token").Output()
	if err != nil || len(b) == 0 {
		t.Fatalf("%s: the agent pod %s's token: %v", n.Name, uids[0], err)
	}
	return strings.TrimSpace(string(b))
}

// TestAgentTouchesOnlyItsOwnNode: root on node 1 reads the agent's
// ServiceAccount token from the kubelet's projected volume and uses it
// with kubectl. The ClusterRole's patch on nodes would let it relabel,
// taint and annotate node 2's Node (its egress IP, the routes node 1
// programs toward it); the chart's podwire-agent-node policy refuses each,
// naming itself, since the token is bound to node 1. On node 1's own Node
// it refuses a label, a foreign annotation and a foreign taint, and lets
// podwire.io/routes through (the agent then puts its records' value back).
// Control: with the policy's binding deleted, the same token labels node
// 2; with the binding back, it no longer can.
func TestAgentTouchesOnlyItsOwnNode(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	agent, who := tokenUser(t, "agent-token-of-"+n1.Name, agentToken(t, n1))
	bound := who.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]
	if u := who.Status.UserInfo.Username; u != "system:serviceaccount:"+agentNS+":podwire-agent" || !slices.Equal(bound, []string{n1.Name}) {
		t.Fatalf("the token read on %s is %s bound to node %v, want podwire-agent bound to %s", n1.Name, u, bound, n1.Name)
	}
	t.Logf("the token read on %s: %s, authentication.kubernetes.io/node-name %v", n1.Name, who.Status.UserInfo.Username, bound)
	t.Cleanup(func() {
		_, _ = c.Kubectl(context.Background(), "", "label", "node", n2.Name, "podwire-test/attack-")
	})

	other := []string{"its own Node", "not Node " + n2.Name}
	for _, tc := range []struct {
		what string
		args []string
	}{
		{"label node 2", []string{"label", "--overwrite", "node", n2.Name, "podwire-test/attack=1"}},
		{"taint node 2", []string{"taint", "--overwrite", "node", n2.Name, "podwire-test/attack=1:NoSchedule"}},
		{"put the startup taint on node 2", []string{"taint", "--overwrite", "node", n2.Name, startupTaint + "=:NoSchedule"}},
		{"set node 2's egress IP", []string{"annotate", "--overwrite", "node", n2.Name, "podwire.io/egress-ip=10.99.0.99"}},
		{"publish routes for node 2", []string{"annotate", "--overwrite", "node", n2.Name, "podwire.io/routes=198.18.0.0/24"}},
	} {
		agent.denied(t, tc.what, agentNodePolicy, other, tc.args...)
	}
	for _, tc := range []struct {
		what string
		args []string
		want string
	}{
		{"label its own Node", []string{"label", "--overwrite", "node", n1.Name, "podwire-test/attack=1"}, "labels"},
		{"annotate its own Node outside podwire.io/", []string{"annotate", "--overwrite", "node", n1.Name, "example.com/attack=1"}, "only the podwire.io/* annotations"},
		{"taint its own Node", []string{"taint", "--overwrite", "node", n1.Name, "podwire-test/attack=1:NoSchedule"}, "only the taint " + startupTaint},
	} {
		agent.denied(t, tc.what, agentNodePolicy, []string{tc.want}, tc.args...)
	}

	// Its own podwire.io/routes: what the agent writes. The agent puts
	// back its records' value within a tick (none published: no
	// annotation); node 2's agent does not route the prefix, outside its
	// forwarding.routablePrefixes.
	const routesKey = "podwire.io/routes"
	before := nodeAnnotation(t, n1.Name, routesKey)
	agent.must(t, "annotate", "--overwrite", "node", n1.Name, routesKey+"=198.18.0.0/24")
	t.Logf("%s may set its own Node's %s", agent.name, routesKey)
	if err := cnitest.Eventually(20*time.Second, func() error {
		if got := nodeAnnotation(t, n1.Name, routesKey); got != before {
			return fmt.Errorf("%s's %s is %q, want its records' %q", n1.Name, routesKey, got, before)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	// Control: the binding gone, the same token labels node 2.
	restore := withoutBinding(t, agentNodePolicy)
	label := []string{"label", "--overwrite", "node", n2.Name, "podwire-test/attack=1"}
	if err := cnitest.Eventually(20*time.Second, func() error {
		_, err := agent.run(label...)
		return err
	}); err != nil {
		t.Fatalf("control: without the binding the agent's token still cannot label %s: %v", n2.Name, err)
	}
	t.Logf("control: without the binding %s, the agent's token of %s labels %s", agentNodePolicy, n1.Name, n2.Name)
	kubectl(t, "", "label", "node", n2.Name, "podwire-test/attack-")
	restore()
	// A new value each try: kubectl sends no patch for a label already set
	// (one set before the binding took effect again).
	try := 0
	if err := cnitest.Eventually(20*time.Second, func() error {
		try++
		out, err := agent.run("label", "--overwrite", "node", n2.Name, fmt.Sprintf("podwire-test/attack=%d", try))
		if err == nil || !strings.Contains(err.Error(), agentNodePolicy) {
			return fmt.Errorf("labelled %s: %v %s", n2.Name, err, out)
		}
		return nil
	}); err != nil {
		t.Fatalf("with the binding back: %v", err)
	}
	t.Logf("with the binding back, the label is refused again")
}

// namespaceOwner is a ServiceAccount bound to cluster-admin by a
// RoleBinding in its own namespace, the usual "namespace owner"; with
// create, it may also create namespaces (a ClusterRole of that verb alone).
func namespaceOwner(t *testing.T, ns string, create bool) *asUser {
	t.Helper()
	kubectl(t, "", "create", "namespace", ns)
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", ns, "--ignore-not-found", "--wait=false") })
	kubectl(t, "", "-n", ns, "create", "serviceaccount", "owner")
	kubectl(t, "", "-n", ns, "create", "rolebinding", "owner", "--clusterrole=cluster-admin", "--serviceaccount="+ns+":owner")
	if create {
		kubectl(t, "", "create", "clusterrole", ns+"-creates-namespaces", "--verb=create", "--resource=namespaces")
		kubectl(t, "", "create", "clusterrolebinding", ns+"-creates-namespaces", "--clusterrole="+ns+"-creates-namespaces",
			"--serviceaccount="+ns+":owner")
		t.Cleanup(func() {
			kubectl(t, "", "delete", "clusterrolebinding,clusterrole", ns+"-creates-namespaces", "--ignore-not-found")
		})
	}
	token := strings.TrimSpace(kubectl(t, "", "-n", ns, "create", "token", "owner", "--duration=1h"))
	u, who := tokenUser(t, ns+"-owner", token)
	if who.Status.UserInfo.Username != "system:serviceaccount:"+ns+":owner" {
		t.Fatalf("the owner's token is %s", who.Status.UserInfo.Username)
	}
	return u
}

// TestNamespaceLabelsAdminOnly: the owner of a namespace (cluster-admin
// bound by a RoleBinding in it, a real ServiceAccount token through
// kubectl) may update its Namespace, which the API authorizes in the
// namespace of the same name: it labels it with a key no policy guards
// (the control: it holds the right the policy narrows). The keys podwire's
// selectors read (forwardingLabel, of forwarding.namespaceSelector), those
// of admissionPolicies.namespaceLabelKeys and every podwire.io/ key are
// refused by podwire-namespace-labels, set, changed or removed, and so is a
// namespace created with one; created without, it is accepted. The admin
// (system:masters) sets them.
func TestNamespaceLabelsAdminOnly(t *testing.T) {
	needCluster(t)
	const ns = "pw-owner"
	owner := namespaceOwner(t, ns, true)
	owner.must(t, "label", "namespace", ns, "example.com/team=a")
	t.Logf("control: %s labels its Namespace %s with example.com/team (no policy guards it)", owner.name, ns)
	refusal := []string{"only the groups system:masters may set, change or remove it"}
	for _, key := range []string{forwardingLabel, guardedLabelKey, "podwire.io/vlan-team"} {
		owner.denied(t, "label its Namespace "+key, namespaceLabelsPolicy, append(refusal, key), "label", "namespace", ns, key+"=true")
	}
	kubectl(t, "", "label", "namespace", ns, forwardingLabel+"=false")
	t.Logf("the admin labels %s %s=false", ns, forwardingLabel)
	owner.denied(t, "change "+forwardingLabel, namespaceLabelsPolicy, append(refusal, forwardingLabel),
		"label", "--overwrite", "namespace", ns, forwardingLabel+"=true")
	owner.denied(t, "remove "+forwardingLabel, namespaceLabelsPolicy, append(refusal, forwardingLabel),
		"label", "namespace", ns, forwardingLabel+"-")

	created := ns + "-made"
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", created, "--ignore-not-found", "--wait=false") })
	manifest := func(labels string) string {
		return fmt.Sprintf("{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": %q, \"labels\": {%s}}}", created, labels)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.KubectlAs(ctx, owner.kubeconfig, owner.cacheDir, manifest(fmt.Sprintf("%q: \"true\"", forwardingLabel)), "create", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), namespaceLabelsPolicy) || !strings.Contains(err.Error(), forwardingLabel) {
		t.Errorf("%s created namespace %s labelled %s: %v %s", owner.name, created, forwardingLabel, err, out)
	} else {
		t.Logf("%s may not create a namespace labelled %s: %s", owner.name, forwardingLabel, firstLine(err.Error()[strings.Index(err.Error(), "denied request"):]))
	}
	if _, err := c.KubectlAs(ctx, owner.kubeconfig, owner.cacheDir, manifest(`"example.com/team": "a"`), "create", "-f", "-"); err != nil {
		t.Errorf("control: %s may not create namespace %s at all: %v", owner.name, created, err)
	} else {
		t.Logf("control: %s creates namespace %s labelled example.com/team", owner.name, created)
	}
}

// TestClosedByDefault: a node that is not ready for podwire (its agent
// away, podwire out of the chain its runtime reads, as on a node just
// registered) starts no pod unchecked for good.
//   - Control: with the startup taint NoSchedule, a pod bound to node 2 by
//     spec.nodeName starts, wired by flannel alone, and its datagram
//     forged from another address arrives.
//   - With the taint NoExecute (how docs/install.md says to register nodes),
//     that pod is evicted, and a new one bound by name is refused by the
//     kubelet: it never gets a sandbox.
//   - A pod tolerating every taint still starts, unchecked, and forges;
//     once the agent is back (unknownInterfaces drop, the chart's
//     default), its forged datagrams are dropped, the taint goes whatever
//     its effect, and a new pod on node 2 is checked.
func TestClosedByDefault(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	receiver := runPod(t, "default", "closed-receiver", n1, nil)
	sink, to := listen(t, receiver, 7405)
	forged := netip.MustParseAddr("10.244.1.251")

	// A pod podwire wired on node 2 and deleted while podwire is out of its
	// chain would leave its record behind (its DEL runs without podwire):
	// TestStartupTaint's early Deployment, which NoExecute would evict
	// from node 2, has no pod during this test.
	if strings.Contains(kubectl(t, "", "-n", "default", "get", "deployment", "--ignore-not-found", "-o", "name"), "deployment.apps/early") {
		kubectl(t, "", "-n", "default", "scale", "deployment", "early", "--replicas=0")
		t.Cleanup(func() { kubectl(t, "", "-n", "default", "scale", "deployment", "early", "--replicas=1") })
		for {
			phases, err := podPhases(ctx, "default", "app=early")
			if err == nil && len(phases) == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the early Deployment's pod is still there: %v %v", phases, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	waitNoAttachments(t, ctx, n2)

	// Node 2 as if just registered: no agent, flannel's conflist as its
	// installer writes it. The cleanups run in reverse: the agent comes
	// back last, and puts podwire back into the chain.
	t.Cleanup(func() {
		kubectl(t, "", "label", "--overwrite", "node", n2.Name, agentNodeLabel+"=on")
		kubectl(t, "", "-n", agentNS, "rollout", "status", "ds/podwire-agent", "--timeout=180s")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := waitChain(ctx, n2); err != nil {
			t.Error(err)
		}
	})
	kubectl(t, "", "label", "node", n2.Name, agentNodeLabel+"-")
	t.Cleanup(func() {
		// Whatever effect is left; an absent taint is an error to kubectl.
		_, _ = c.Kubectl(context.Background(), "", "taint", "node", n2.Name, startupTaint+"-")
	})
	waitNoAgent(t, ctx, n2)
	conflist := filepath.Join(n2.CNIConfDir, "10-flannel.conflist")
	b, _ := json.MarshalIndent(conflistWithoutPodwire(t, conflist), "", "  ")
	if err := os.WriteFile(conflist, b, 0o644); err != nil {
		t.Fatal(err)
	}
	waitChainWithout(t, ctx, n2)
	t.Logf("%s: no agent, and its runtime's chain is flannel's without podwire", n2.Name)

	kubectl(t, "", "taint", "--overwrite", "node", n2.Name, startupTaint+"=:NoSchedule")
	early := boundPod(t, ctx, "bound-noschedule", n2, false)
	forge(t, sink, to, early, forged, true, "under "+startupTaint+":NoSchedule, no agent")

	kubectl(t, "", "taint", "--overwrite", "node", n2.Name, startupTaint+"=:NoExecute")
	kubectl(t, "", "taint", "node", n2.Name, startupTaint+":NoSchedule-")
	start := time.Now()
	waitNoPod(t, ctx, early)
	t.Logf("%s:NoExecute evicted %s %v after it was set", startupTaint, early.name, time.Since(start).Round(100*time.Millisecond))
	refusedByKubelet(t, ctx, "bound-noexecute", n2)

	tolerant := boundPod(t, ctx, "tolerates-all", n2, true)
	forge(t, sink, to, tolerant, forged, true, "tolerating every taint, no agent")

	kubectl(t, "", "label", "node", n2.Name, agentNodeLabel+"=on")
	start = time.Now()
	waitMetric(t, n2, 2*time.Minute, "an unknown interface on "+n2.Name, func(s scrape) bool {
		return s.sum("podwire_unknown_interfaces", nil) >= 1
	})
	t.Logf("%s's agent, back, reports %s's interface unknown %v after its return", n2.Name, tolerant.name, time.Since(start).Round(100*time.Millisecond))
	forge(t, sink, to, tolerant, forged, false, "unknownInterfaces drop")
	if err := waitChain(ctx, n2); err != nil {
		t.Fatal(err)
	}
	if err := cnitest.Eventually(time.Minute, func() error {
		if e := taintEffect(t, n2); e != "" {
			return fmt.Errorf("%s still carries %s:%s", n2.Name, startupTaint, e)
		}
		return nil
	}); err != nil {
		t.Fatalf("with its agent Ready: %v", err)
	}
	t.Logf("%s's agent removed %s:NoExecute %v after its return", n2.Name, startupTaint, time.Since(start).Round(100*time.Millisecond))
	checkedPod(t, sink, to, runPod(t, "default", "closed-after", n2, nil), forged, "after its agent's return")
}

// waitNoAgent waits until no podwire-agent pod is left on node n.
func waitNoAgent(t *testing.T, ctx context.Context, n *cluster.Node) {
	t.Helper()
	for {
		names := agentPods(t, n.Name, "{.items[*].metadata.name}")
		if names == "" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the agent is still on %s: %s", n.Name, names)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitChainWithout waits until node n's containerd has loaded flannel's
// chain without podwire.
func waitChainWithout(t *testing.T, ctx context.Context, n *cluster.Node) {
	t.Helper()
	for {
		conf, err := n.CNIConfig(ctx)
		if err == nil && strings.Contains(conf, `\"type\":\"flannel\"`) && !strings.Contains(conf, `\"type\":\"podwire\"`) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: containerd did not load flannel's chain without podwire: %v\n%s", n.Name, err, conf)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// boundPodManifest is a pause pod in the default namespace bound to node n
// by spec.nodeName (the scheduler never sees it), tolerating every taint
// when tolerant.
func boundPodManifest(name string, n *cluster.Node, tolerant bool) string {
	spec := map[string]any{
		"nodeName": n.Name, "automountServiceAccountToken": false, "terminationGracePeriodSeconds": 1,
		"containers": []map[string]any{{"name": "main", "image": cluster.PauseImage, "imagePullPolicy": "Never"}},
	}
	if tolerant {
		spec["tolerations"] = []map[string]any{{"operator": "Exists"}}
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "default"}, "spec": spec})
	return string(b)
}

// boundPod creates boundPodManifest's pod, waits until it is Ready and
// deletes it when the test ends.
func boundPod(t *testing.T, ctx context.Context, name string, n *cluster.Node, tolerant bool) *pod {
	t.Helper()
	t.Cleanup(func() {
		kubectl(t, "", "delete", "pod", "-n", "default", name, "--ignore-not-found", "--wait=true", "--timeout=90s")
	})
	kubectl(t, boundPodManifest(name, n, tolerant), "create", "-f", "-")
	p, err := waitPod(ctx, "default", name, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s, bound to %s by name (tolerating every taint: %v), runs: %s", name, n.Name, tolerant, p.ip4)
	return p
}

// refusedByKubelet creates boundPodManifest's pod (no tolerations) and
// waits until it is refused on node n: failed by the kubelet's admission
// or deleted by the taint eviction controller, whichever comes first, and
// never a sandbox on n.
func refusedByKubelet(t *testing.T, ctx context.Context, name string, n *cluster.Node) {
	t.Helper()
	t.Cleanup(func() {
		kubectl(t, "", "delete", "pod", "-n", "default", name, "--ignore-not-found", "--wait=true", "--timeout=90s")
	})
	uid := kubectl(t, boundPodManifest(name, n, false), "create", "-f", "-", "-o", "jsonpath={.metadata.uid}")
	var how string
	for how == "" {
		var p struct {
			Metadata struct{ UID string }
			Status   struct{ Phase, Reason, Message string }
		}
		b, err := c.API(ctx, "GET", "/api/v1/namespaces/default/pods/"+name, nil)
		switch {
		case err != nil && strings.Contains(err.Error(), "404"):
			how = "deleted by the taint eviction controller"
		case err != nil:
			t.Fatal(err)
		case json.Unmarshal(b, &p) != nil:
			t.Fatalf("pod %s: %s", name, b)
		case p.Metadata.UID != uid:
			how = "deleted by the taint eviction controller"
		case p.Status.Phase == "Failed":
			how = fmt.Sprintf("refused by the kubelet: %s, %s", p.Status.Reason, p.Status.Message)
		case p.Status.Phase == "Running" || ctx.Err() != nil:
			t.Fatalf("pod %s bound to %s under %s:NoExecute: phase %q", name, n.Name, startupTaint, p.Status.Phase)
		default:
			time.Sleep(100 * time.Millisecond)
		}
	}
	if s, err := n.Sandboxes(ctx, uid); err != nil || len(s) != 0 {
		t.Fatalf("pod %s %s, yet %s has its sandboxes %v (%v)", name, how, n.Name, s, err)
	}
	t.Logf("pod %s, bound to %s by name under %s:NoExecute: %s; no sandbox", name, n.Name, startupTaint, how)
}

// forge sends from p's netns three datagrams forged from forged to the
// sink at to, and fails t unless they arrive (arrive) or not, as why says.
func forge(t *testing.T, sink *packets.Sink, to netip.AddrPort, p *pod, forged netip.Addr, arrive bool, why string) {
	t.Helper()
	payload := fmt.Sprintf("forged-%s-%v", p.name, arrive)
	if err := packets.SendFrom(p.netns, forged, to, payload, 3); err != nil {
		t.Fatal(err)
	}
	if arrive {
		if !sink.WaitGot(forged, payload, 10*time.Second) {
			t.Fatalf("%s on %s, %s: its datagram forged from %s did not arrive", p.name, p.node.Name, why, forged)
		}
		t.Logf("%s on %s, %s: its datagram forged from %s arrives", p.name, p.node.Name, why, forged)
		return
	}
	time.Sleep(2 * time.Second)
	if sink.Got(forged, payload) {
		t.Fatalf("%s on %s, %s: its datagram forged from %s arrived", p.name, p.node.Name, why, forged)
	}
	t.Logf("%s on %s, %s: its datagrams forged from %s are dropped", p.name, p.node.Name, why, forged)
}

// agentClaimsPolicy narrows the agent's writes of ClaimPools to its own
// Node's entries.
const agentClaimsPolicy = "podwire-agent-claims"

// TestAgentClaimsOnlyItsOwn: root on node 1, with the agent's token, writes
// a ClaimPool that holds an entry of node 2. It may add and release node
// 1's own claims, also in a pool of 3,000 entries; adding a claim for node
// 2, changing node 2's and releasing it are refused by
// podwire-agent-claims, naming node 2; the claim of a Node that no longer
// exists (as after a node's removal, which the claims' reconciler
// releases) it may release. Control: with the policy's binding deleted,
// the same token releases node 2's claim.
func TestAgentClaimsOnlyItsOwn(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	agent, _ := tokenUser(t, "agent-token-of-"+n1.Name, agentToken(t, n1))
	// Pools of VLANs no test grants. The entries of existing Nodes are new
	// (since now): the reconcilers release an entry without a record only
	// a minute after its claim, and the gone Node's as late: the test
	// writes new ones for each step that needs them, so that no
	// reconciler writes a pool while the test does.
	const pool, gonePool = "vlan-4001", "vlan-4003"
	since := time.Now().UTC().Format(time.RFC3339)
	entry := func(node, addr, pod string) map[string]any {
		return map[string]any{"kind": "address", "value": addr, "namespace": "default", "pod": pod, "node": node,
			"attachment": "0000/net1", "since": since}
	}
	for name, e := range map[string]map[string]any{pool: entry(n2.Name, "192.0.2.2", "on-node-2"), gonePool: entry("gone-node", "192.0.2.3", "on-gone-node")} {
		b, _ := json.Marshal(map[string]any{"apiVersion": "podwire.io/v1alpha1", "kind": "ClaimPool", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"entries": []any{e}}})
		kubectl(t, string(b), "create", "-f", "-")
		t.Cleanup(func() { kubectl(t, "", "delete", "claimpool", name, "--ignore-not-found") })
	}
	// Each write is what the agent sends (its RBAC has update, not patch):
	// the pool as read, with its entries changed, conditional on the
	// resourceVersion read.
	dir := t.TempDir()
	writeIn := func(pool, name string, f func(entries []any) []any) []string {
		var obj map[string]any
		if err := json.Unmarshal([]byte(kubectl(t, "", "get", "claimpool", pool, "-o", "json")), &obj); err != nil {
			t.Fatal(err)
		}
		spec, _ := obj["spec"].(map[string]any)
		if spec == nil {
			spec = map[string]any{}
			obj["spec"] = spec
		}
		es, _ := spec["entries"].([]any) // none: the last one released
		spec["entries"] = f(es)
		b, _ := json.Marshal(obj)
		file := filepath.Join(dir, name+".json")
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"replace", "-f", file}
	}
	write := func(name string, f func(entries []any) []any) []string { return writeIn(pool, name, f) }
	add := func(e map[string]any) []string {
		return write("add", func(es []any) []any { return append(es, e) })
	}
	releaseIn := func(pool, value string) []string {
		return writeIn(pool, "release", func(es []any) []any {
			return slices.DeleteFunc(es, func(e any) bool { return e.(map[string]any)["value"] == value })
		})
	}
	release := func(value string) []string { return releaseIn(pool, value) }
	change := func(value string) []string {
		return write("change", func(es []any) []any {
			for _, e := range es {
				if m := e.(map[string]any); m["value"] == value {
					m["pod"] = "taken"
				}
			}
			return es
		})
	}

	agent.must(t, add(entry(n1.Name, "192.0.2.1", "on-node-1"))...)
	t.Logf("%s may add a claim of its own Node %s", agent.name, n1.Name)
	agent.denied(t, "claim for node 2", agentClaimsPolicy, []string{"of node " + n2.Name}, add(entry(n2.Name, "192.0.2.4", "forged"))...)
	agent.denied(t, "change node 2's claim", agentClaimsPolicy, []string{"of node " + n2.Name}, change("192.0.2.2")...)
	agent.denied(t, "release node 2's claim", agentClaimsPolicy, []string{"Node " + n2.Name + " exists"}, release("192.0.2.2")...)
	agent.must(t, release("192.0.2.1")...)
	t.Logf("%s may release its own Node's claim", agent.name)

	// A pool as large as a cluster's: the policy compares every entry with
	// the old ones once per Node, within the apiserver's CEL cost budget
	// (over it, the policy would refuse the agent's own claims).
	const many = 3000
	since = time.Now().UTC().Format(time.RFC3339)
	big := make([]any, many)
	for i := range big {
		big[i] = entry(n2.Name, netip.AddrFrom4([4]byte{10, 201, byte(i >> 8), byte(i)}).String(), fmt.Sprintf("held-%d", i))
	}
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"entries": big}})
	bigPatch := filepath.Join(dir, "big.json")
	if err := os.WriteFile(bigPatch, b, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "", "patch", "claimpool", pool, "--type=merge", "--patch-file="+bigPatch)
	agent.must(t, add(entry(n1.Name, "192.0.2.1", "on-node-1"))...)
	agent.must(t, release("192.0.2.1")...)
	t.Logf("%s adds and releases its own claim in a pool of %d entries of %s", agent.name, many, n2.Name)
	agent.denied(t, "release node 2's claim in the large pool", agentClaimsPolicy, []string{"Node " + n2.Name + " exists"}, release("10.201.0.0")...)

	agent.must(t, releaseIn(gonePool, "192.0.2.3")...)
	if e := kubectl(t, "", "get", "claimpool", gonePool, "-o", "jsonpath={.spec.entries[*].value}"); strings.Contains(e, "192.0.2.3") {
		t.Fatalf("the gone Node's claim 192.0.2.3 still in %s: %s", gonePool, e)
	}
	t.Logf("%s may release the claim of a Node that no longer exists", agent.name)

	// Control: the binding gone, the same token releases node 2's claim
	// (a new one: the reconciler may have released the others by now).
	// Each try reads the pool again.
	since = time.Now().UTC().Format(time.RFC3339)
	b, _ = json.Marshal(map[string]any{"spec": map[string]any{"entries": []any{entry(n2.Name, "192.0.2.5", "control")}}})
	if err := os.WriteFile(bigPatch, b, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "", "patch", "claimpool", pool, "--type=merge", "--patch-file="+bigPatch)
	restore := withoutBinding(t, agentClaimsPolicy)
	if err := cnitest.Eventually(20*time.Second, func() error {
		_, err := agent.run(release("192.0.2.5")...)
		return err
	}); err != nil {
		t.Fatalf("control: without the binding the agent's token still cannot release node 2's claim: %v", err)
	}
	if e := kubectl(t, "", "get", "claimpool", pool, "-o", "jsonpath={.spec.entries[*].value}"); strings.Contains(e, "192.0.2.5") {
		t.Fatalf("control: node 2's claim 192.0.2.5 still in %s: %s", pool, e)
	}
	t.Logf("control: without the binding %s, the agent's token of %s releases %s's claim", agentClaimsPolicy, n1.Name, n2.Name)
	restore()
}

// withoutBinding deletes the ValidatingAdmissionPolicyBinding name and
// returns what creates it again (also run when the test ends, if not
// before).
func withoutBinding(t *testing.T, name string) (restore func()) {
	t.Helper()
	var binding map[string]any
	if err := json.Unmarshal([]byte(kubectl(t, "", "get", "validatingadmissionpolicybinding", name, "-o", "json")), &binding); err != nil {
		t.Fatal(err)
	}
	meta := binding["metadata"].(map[string]any)
	for _, k := range []string{"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"} {
		delete(meta, k)
	}
	delete(binding, "status")
	b, _ := json.Marshal(binding)
	kubectl(t, "", "delete", "validatingadmissionpolicybinding", name)
	restored := false
	restore = func() {
		if !restored {
			restored = true
			kubectl(t, string(b), "create", "-f", "-")
		}
	}
	t.Cleanup(restore)
	return restore
}
