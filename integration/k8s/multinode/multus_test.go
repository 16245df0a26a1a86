package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/cnitest"
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
//   - the agents stay Ready and the startup taint away while Multus's
//     clusterNetwork is the path it generates, the cluster network's
//     conflist name, a directory whose first conflist chains podwire, or a
//     NetworkAttachmentDefinition in Multus's namespace whose config does
//     (a pod then started is checked: Multus ran podwire from it); a
//     clusterNetwork naming a conflist without podwire puts the taint back
//     on that node, and a pod for it waits until it names podwire's chain
//     again.
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
	nad := fmt.Sprintf(`{"cniVersion":"0.3.1","name":%q,"type":"macvlan","master":"eth0","mode":"bridge",`+
		`"capabilities":{"ips":true},"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]]}}`, macvlanNet, macvlanPrefix)
	kubectl(t, fmt.Sprintf("apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: %s, namespace: default}\nspec:\n  config: '%s'\n",
		macvlanNet, nad), "apply", "-f", "-")
	kubectl(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+forwardingNS+"}\n", "apply", "-f", "-")
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", forwardingNS, "--wait=true", "--timeout=90s") })

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
	t.Run("clusterNetwork", func(t *testing.T) {
		multusClusterNetworks(t, ctx, multus)
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

// multusClusterNetworks runs Multus with a configuration of the
// operator's (its daemon's multusConfigFile, copied into the conf dir as
// 00-multus.conf when the daemon starts) for each form of clusterNetwork,
// and checks each node's startup taint, which its agent keeps off only
// while the runtime's chain, through Multus, holds podwire.
func multusClusterNetworks(t *testing.T, ctx context.Context, multus cluster.Multus) {
	n2 := c.Nodes[1]
	// A directory whose first conflist is the cluster network's chain,
	// podwire included, on each node; and a conflist named "plain": on
	// node 1 that chain again, on node 2 the chain without podwire, so
	// that a clusterNetwork naming "plain" takes podwire out of node 2's
	// chain alone.
	const userDir = "/var/lib/cni/multus/net.d" // the daemon's /etc/cni/multus/net.d
	for _, n := range c.Nodes {
		chain, err := os.ReadFile(filepath.Join(n.CNIConfDir, "10-flannel.conflist"))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, n.Path(userDir+"/primary/10-flannel.conflist"), chain)
		var plain map[string]any
		if err := json.Unmarshal(chain, &plain); err != nil {
			t.Fatal(err)
		}
		if n == n2 {
			plain = conflistWithoutPodwire(t, filepath.Join(n.CNIConfDir, "10-flannel.conflist"))
		}
		plain["name"] = "plain"
		b, _ := json.Marshal(plain)
		path := n.Path("/etc/cni/net.d/90-plain.conflist")
		writeFile(t, path, b)
		defer os.Remove(path)
	}

	run := func(clusterNetwork string) {
		t.Helper()
		user, _ := json.Marshal(map[string]any{"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus-shim",
			"logLevel": "verbose", "logToStderr": true, "clusterNetwork": clusterNetwork})
		for _, n := range c.Nodes {
			writeFile(t, n.Path(userDir+"/00-multus.conf"), user)
		}
		conf := map[string]any{}
		for k, v := range cluster.MultusDaemonConfig {
			conf[k] = v
		}
		conf["multusConfigFile"] = "/etc/cni/multus/net.d/00-multus.conf"
		if err := c.InstallMultus(ctx, cluster.Multus{Image: multus.Image, DaemonConfig: conf}); err != nil {
			t.Fatal(err)
		}
		kubectl(t, "", "-n", "kube-system", "rollout", "restart", "ds/kube-multus-ds")
		kubectl(t, "", "-n", "kube-system", "rollout", "status", "ds/kube-multus-ds", "--timeout=120s")
		for _, n := range c.Nodes {
			if err := cnitest.Eventually(30*time.Second, func() error {
				got, err := os.ReadFile(n.Path("/etc/cni/net.d/00-multus.conf"))
				if err != nil || !strings.Contains(string(got), fmt.Sprintf("%q", clusterNetwork)) {
					return fmt.Errorf("%s: 00-multus.conf is %q (%v), want clusterNetwork %q", n.Name, got, err, clusterNetwork)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	untainted := func(form string) {
		t.Helper()
		for _, n := range c.Nodes {
			if err := cnitest.Eventually(20*time.Second, func() error {
				if e := taintEffect(t, n); e != "" {
					return fmt.Errorf("%s carries %s:%s", n.Name, startupTaint, e)
				}
				return nil
			}); err != nil {
				t.Errorf("clusterNetwork as %s: %v", form, err)
			}
		}
		t.Logf("clusterNetwork as %s: both agents Ready, no startup taint", form)
	}
	defer func() {
		// Multus's own configuration again, as TestMultus installed it.
		if err := c.InstallMultus(ctx, multus); err != nil {
			t.Error(err)
		}
		kubectl(t, "", "-n", "kube-system", "rollout", "restart", "ds/kube-multus-ds")
		kubectl(t, "", "-n", "kube-system", "rollout", "status", "ds/kube-multus-ds", "--timeout=120s")
	}()

	run("cbr0")
	untainted(`the cluster network's conflist name "cbr0"`)
	run("/host" + userDir + "/primary")
	untainted("a directory whose first conflist chains podwire")

	// A NetworkAttachmentDefinition in Multus's namespace whose config is
	// the cluster network's chain: the agents read it (the chart's
	// multus.namespace), and Multus runs podwire from it.
	chain, err := os.ReadFile(filepath.Join(c.Nodes[0].CNIConfDir, "10-flannel.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	nad, _ := json.Marshal(map[string]any{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": "podwire-cluster", "namespace": "kube-system"}, "spec": map[string]any{"config": string(chain)}})
	kubectl(t, string(nad), "apply", "-f", "-")
	run("podwire-cluster")
	untainted("the NetworkAttachmentDefinition kube-system/podwire-cluster, whose config chains podwire")
	receiver := runPod(t, "default", "multus-receiver", c.Nodes[0], nil)
	sink, to := listen(t, receiver, 7422)
	checkedPod(t, sink, to, runPod(t, "default", "multus-nad", c.Nodes[1], nil), netip.MustParseAddr("203.0.113.79"),
		"its cluster network the NetworkAttachmentDefinition's chain")

	run("plain")
	if err := cnitest.Eventually(20*time.Second, func() error {
		if e := taintEffect(t, n2); e != "NoSchedule" {
			return fmt.Errorf("%s has no %s:NoSchedule (effect %q)", n2.Name, startupTaint, e)
		}
		return nil
	}); err != nil {
		t.Fatalf(`clusterNetwork "plain" (no podwire): %v`, err)
	}
	if e := taintEffect(t, c.Nodes[0]); e != "" {
		t.Errorf("%s, whose conflist \"plain\" chains podwire, carries %s:%s", c.Nodes[0].Name, startupTaint, e)
	}
	t.Logf(`clusterNetwork "plain", a conflist without podwire on %s: its agent put %s:NoSchedule back`, n2.Name, startupTaint)
	kubectl(t, deploymentManifest("multus-late", n2.Name), "apply", "-f", "-")
	t.Cleanup(func() {
		kubectl(t, "", "delete", "deployment", "multus-late", "--ignore-not-found", "--cascade=foreground", "--wait=true", "--timeout=90s")
	})
	msg, err := waitUnschedulable(ctx, "multus-late")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a pod for %s meanwhile: %s", n2.Name, msg)
	run("cbr0")
	untainted(`"cbr0" again`)
	checkedPod(t, sink, to, waitScheduledPod(t, ctx, "multus-late"), netip.MustParseAddr("203.0.113.78"), "scheduled once its node's taint went")
}

// writeFile writes data at path, its directory made.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
