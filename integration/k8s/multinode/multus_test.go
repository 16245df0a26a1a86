package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// Multus thick (PODWIRE_MULTUS, scripts/multus-build.sh's directory) runs
// on the cluster only while TestMultus runs: its stock manifest, its image
// built from source and pushed to the run's registry. Its daemon writes
// 00-multus.conf into every node's conf dir, which sorts first, so from
// then on every pod's network is Multus's: the cluster network (flannel's
// conflist, podwire chained in it, run whole by the daemon) as eth0, and
// each NetworkAttachmentDefinition the pod selects as net1, net2, ...

// macvlanNet is the NetworkAttachmentDefinition of TestMultus's pods: a
// macvlan (bridge mode) on each node's uplink, addresses from host-local
// inside macvlanPrefix, each pod's asked for in its selection (the ips
// capability), so that pods on two nodes meet on the uplinks' segment.
const macvlanNet = "macvlan-uplink"

var macvlanPrefix = netip.MustParsePrefix("10.98.7.0/24")

// multusImageTag is the tag MultusImage is pushed with.
const multusImageTag = "k8snetworkplumbingwg/multus-cni:v4.2.2-thick"

// TestMultus proves podwire under a real Multus thick, with packets:
//   - a pod on each node selecting macvlanNet has eth0 on the cluster
//     network and net1 on the macvlan (Multus's network-status says so),
//     and the two reach each other on net1 across the uplinks;
//   - such a pod is source-checked on eth0 (forged dropped, own
//     delivered): Multus ran podwire in the cluster network's chain, with
//     the pod's annotations from the agent (Multus passes no annotation
//     capability);
//   - a forwarding pod (podwire.io/forwarding, in the namespace the gates
//     grant) with the same attachment sends a forged source that arrives:
//     its annotation reached podwire through the agent;
//   - podwire is chained after the macvlan too (the NetworkAttachment-
//     Definition is a conflist of macvlan and the cluster's podwire entry):
//     a macvlan has no host interface, so each pod's net1 is recorded
//     unchecked, and the chart's PodwireUncheckedPods alert, evaluated by
//     promtool on the agents' own scrapes (as TestAlertsOnScrapes does),
//     fires for both nodes and for nothing else, after a control on the
//     scrapes from before the pods where it does not.
//
// The agent's reading of Multus's clusterNetwork in its other forms (a
// conflist's name, a directory, a NetworkAttachmentDefinition) is proven
// by pkg/agent's tests only: Multus v4.2.2's thick daemon exits as soon
// as it starts with an operator's configuration file (multusConfigFile
// not "auto": its main waits on a WaitGroup that only the auto mode's
// configuration manager adds to), so no real Multus here runs those forms.
func TestMultus(t *testing.T) {
	needCluster(t)
	dir := os.Getenv("PODWIRE_MULTUS")
	if dir == "" {
		t.Fatal("needs PODWIRE_MULTUS, the directory of scripts/multus-build.sh: run it with make test-k8s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	img, err := cluster.MultusImage(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := c.Push(ctx, img, multusImageTag)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("  " + cluster.VersionLine(ctx, "multus (thick)", filepath.Join(dir, "multus-shim"), "-version"))
	start := time.Now()
	multus := cluster.Multus{Image: ref}
	if err := c.InstallMultus(ctx, multus); err != nil {
		t.Fatal(err)
	}
	t.Logf("Multus %s running on every node, its 00-multus.conf written, in %v", ref, time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.UninstallMultus(ctx, multus); err != nil {
			t.Error(err)
		}
	})
	entry := kubectl(t, "", "-n", agentNS, "get", "configmap", "podwire-config", "-o", "jsonpath={.data.entry}")
	nad := fmt.Sprintf(`{"cniVersion":"0.3.1","name":%q,"plugins":[{"type":"macvlan","master":"eth0","mode":"bridge",`+
		`"capabilities":{"ips":true},"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]]}},%s]}`, macvlanNet, macvlanPrefix, entry)
	kubectl(t, fmt.Sprintf("apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: %s, namespace: default}\nspec:\n  config: '%s'\n",
		macvlanNet, nad), "apply", "-f", "-")
	kubectl(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+forwardingNS+"}\n", "apply", "-f", "-")
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", forwardingNS, "--wait=true", "--timeout=90s") })

	promtool := os.Getenv("PODWIRE_PROMTOOL")
	var rec *recording
	control := -1
	if promtool != "" {
		rec = startRecording(c.Nodes)
		defer rec.stop()
		rec.waitSlots(t, int(2*alertFor/alertStep)+1)
		control = rec.slots() - 1
	}

	a := multusPod(t, ctx, "default", "multus-a", c.Nodes[0], 11, nil)
	b := multusPod(t, ctx, "default", "multus-b", c.Nodes[1], 12, nil)
	fwd := multusPod(t, ctx, forwardingNS, "multus-fwd", c.Nodes[1], 13, map[string]string{"podwire.io/forwarding": "true"})

	t.Run("attachment", func(t *testing.T) {
		sink, err := packets.NewSink(b.netns, 7420)
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Close()
		src, dst := macvlanAddr(11), netip.AddrPortFrom(macvlanAddr(12), 7420)
		if err := packets.SendFrom(a.netns, src, dst, "over-net1", 3); err != nil {
			t.Fatal(err)
		}
		if !sink.WaitGot(src, "over-net1", 10*time.Second) {
			t.Fatalf("%s on %s did not reach %s on %s over net1", src, a.node.Name, dst, b.node.Name)
		}
		t.Logf("%s on %s reached %s on %s over net1 (the macvlan on the uplinks)", src, a.node.Name, dst, b.node.Name)
	})
	t.Run("sourceCheck", func(t *testing.T) {
		sink, to := listen(t, b, 7421)
		checkedPod(t, sink, to, a, netip.MustParseAddr("10.244.1.250"), "a pod of Multus with a NetworkAttachmentDefinition")
		forge(t, sink, to, fwd, netip.MustParseAddr("10.244.0.251"), true, "a forwarding pod of Multus (its annotation from the agent)")
	})
	t.Run("uncheckedAlert", func(t *testing.T) {
		if rec == nil {
			t.Skip("PODWIRE_PROMTOOL unset: make test-k8s builds promtool (scripts/promtool-build.sh)")
		}
		for _, n := range c.Nodes {
			waitMetric(t, n, 30*time.Second, "an unchecked attachment (net1)", func(s scrape) bool { return s.sum("podwire_pods_unchecked", nil) >= 1 })
		}
		rec.waitSlots(t, rec.slots()+int(2*alertFor/alertStep)+1)
		rec.stop()
		last := rec.slots() - 1
		want := map[string][]map[string]string{"PodwireUncheckedPods": nil}
		for _, n := range c.Nodes {
			want["PodwireUncheckedPods"] = append(want["PodwireUncheckedPods"],
				map[string]string{"instance": metricsTarget(n), "job": alertJob, "node": n.Name, "severity": "warning"})
		}
		dir := t.TempDir()
		renderAlertRules(t, filepath.Join(dir, "rules.yaml"))
		b, err := rec.promtoolTest(control, last, want)
		if err != nil {
			t.Fatal(err)
		}
		testFile := filepath.Join(dir, "scrapes_test.yaml")
		if err := os.WriteFile(testFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.CommandContext(ctx, promtool, "test", "rules", testFile).CombinedOutput(); err != nil {
			t.Fatalf("promtool test rules on the agents' scrapes: %v\n%s\n--- the test ---\n%s", err, out, b)
		}
		t.Logf("PodwireUncheckedPods fired for both nodes on %d scrapes each, not before the pods (scrape %d)", last+1, control+1)
	})
}

// macvlanAddr is the address host i of macvlanPrefix.
func macvlanAddr(i byte) netip.Addr {
	b := macvlanPrefix.Addr().As4()
	b[3] = i
	return netip.AddrFrom4(b)
}

// multusPod runs a pod on n selecting macvlanNet with the address host of
// macvlanPrefix, with annotations, and checks what Multus reports of it:
// eth0 on the cluster network and net1 with that address in its
// network-status annotation. It is deleted when t ends.
func multusPod(t *testing.T, ctx context.Context, namespace, name string, n *cluster.Node, host byte, annotations map[string]string) *pod {
	t.Helper()
	ann := map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(`[{"name":%q,"namespace":"default","ips":["%s/%d"]}]`,
		macvlanNet, macvlanAddr(host), macvlanPrefix.Bits())}
	for k, v := range annotations {
		ann[k] = v
	}
	t.Cleanup(func() {
		kubectl(t, "", "delete", "pod", "-n", namespace, name, "--ignore-not-found", "--wait=true", "--timeout=90s")
	})
	if err := createPod(ctx, namespace, name, n, nil, ann); err != nil {
		t.Fatal(err)
	}
	p, err := waitPod(ctx, namespace, name, n)
	if err != nil {
		t.Fatal(err)
	}
	status := kubectl(t, "", "get", "pod", "-n", namespace, name, "-o", `jsonpath={.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}`)
	var nets []struct {
		Name      string   `json:"name"`
		Interface string   `json:"interface"`
		IPs       []string `json:"ips"`
	}
	if err := json.Unmarshal([]byte(status), &nets); err != nil {
		t.Fatalf("pod %s/%s: Multus's network-status %q: %v", namespace, name, status, err)
	}
	var ifaces []string
	for _, nt := range nets {
		ifaces = append(ifaces, fmt.Sprintf("%s=%s%v", nt.Interface, nt.Name, nt.IPs))
	}
	got := strings.Join(ifaces, " ")
	if len(nets) != 2 || nets[0].Interface != "eth0" || nets[1].Interface != "net1" ||
		!strings.Contains(got, p.ip4.String()) || !strings.Contains(got, macvlanAddr(host).String()) {
		t.Fatalf("pod %s/%s: Multus's network-status is %s, want eth0 with %s and net1 with %s", namespace, name, got, p.ip4, macvlanAddr(host))
	}
	t.Logf("pod %s/%s on %s, by Multus: %s", namespace, name, n.Name, got)
	return p
}
