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
	"github.com/podwire/podwire/integration/packets"
)

// TestNodeDataBounded: node 2's kubelet, with its own credentials
// (system:node:NAME under NodeRestriction, which lets it annotate and
// address its own Node only), writes on its Node what a compromised
// kubelet would: podwire.io/routes of 0.0.0.0/0,::/0, of 0.0.0.0/1, of
// 5,000 host routes, and an InternalIP forged into the prefix that node
// 2's router serves. Throughout, a pod on node 1 leaves the cluster from
// node 1's egress IPs (the echo server on the outside network sees them),
// node 1's routes toward node 2's router stay as they were, node 1's
// agent's CPU stays within two percent of a core of its idle figure, and
// it names the refused data in its log. Node 2's agent puts its own
// annotation back at each tick, so the kubelet writes it again and again,
// as an attacker would.
//
// The control: before the bounds, the agents copied every Node's
// annotation into the egress table's exceptions and let any node IP fence
// a prefix; the same Nodes read that way made 0.0.0.0/0, ::/0, 0.0.0.0/1
// and the 5,000 /32s exceptions of every node, and the forged InternalIP
// withdrew node 2's prefix (pkg/agent's TestNodeDataBounded, whose
// comment names that run). Here, node 1's agent logging the refusal
// proves the kubelet's writes reached it.
func TestNodeDataBounded(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	egressOnEveryNode(t)
	const port = 7510
	packets.EchoServer(t, c.OutsideNetNS, netip.AddrPortFrom(serverIP, port))
	packets.EchoServer(t, c.OutsideNetNS, netip.AddrPortFrom(serverIP6, port))

	// Node 2 serves routedNet through a router pod; node 1 routes it.
	kubectl(t, "", "create", "namespace", forwardingNS)
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", forwardingNS, "--wait=true", "--timeout=90s") })
	if err := createPod(ctx, forwardingNS, "router", n2, nil, map[string]string{
		"podwire.io/forwarding": "true", "podwire.io/routes": routedNet.String(),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitPod(ctx, forwardingNS, "router", n2); err != nil {
		t.Fatal(err)
	}
	if err := cnitest.Eventually(45*time.Second, func() error {
		if r := nodeRoutes(t, n1); !strings.Contains(r, routedNet.String()) {
			return fmt.Errorf("%s does not route %s:\n%s", n1.Name, routedNet, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	routesBefore := nodeRoutes(t, n1)
	client := runPod(t, "default", "nodedata-client", n1, nil)
	egress4, egress6 := egressIPs(0)
	// holds checks what must hold whatever node 2's kubelet writes: the
	// egress IPs, no route of node 1 beyond those it had, and, unless
	// node 2's Node is over the cap (then it contributes none, by
	// design), the route to node 2's router.
	holds := func(phase string, overCap bool) {
		t.Helper()
		for _, dst := range []netip.AddrPort{netip.AddrPortFrom(serverIP, port), netip.AddrPortFrom(serverIP6, port)} {
			want := egress4
			if dst.Addr().Is6() {
				want = egress6
			}
			if got := sourceSeen(t, client, dst); got != want {
				t.Fatalf("%s: pod %s on %s reached %s from %s, want its node's egress IP %s", phase, client.name, n1.Name, dst, got, want)
			}
		}
		r := nodeRoutes(t, n1)
		for _, l := range strings.Split(r, "\n") {
			if l != "" && !strings.Contains(routesBefore, l) {
				t.Fatalf("%s: %s routes %q, which it did not before:\n%s", phase, n1.Name, l, routesBefore)
			}
		}
		if !overCap && r != routesBefore {
			t.Fatalf("%s: %s's routes changed (%s's podwire.io/routes now %.120q):\n%s\nwere:\n%s", phase, n1.Name,
				n2.Name, nodeAnnotation(t, n2.Name, "podwire.io/routes"), r, routesBefore)
		}
	}
	holds("before", false)

	// Node 1's agent's CPU, its children's included (the repair it
	// runs): idle first, over as long as an attack lasts.
	agent1 := agentProcess(t, n1)
	agentCPU := func() float64 { return procCPU()[agent1].cpu }
	const window = 8 * time.Second
	cpu0, t0 := agentCPU(), time.Now()
	time.Sleep(window)
	idleCPU := (agentCPU() - cpu0) / time.Since(t0).Seconds()
	t.Logf("%s's agent, idle: %.2f%% of a core over %v", n1.Name, 100*idleCPU, window)

	// As node 2's kubelet.
	dir := t.TempDir()
	cacheDir := filepath.Join(dir, "kubelet-cache")
	var writeAsKubelet func(patch any, subresource string) error
	asKubelet := func(patch any, subresource string) {
		t.Helper()
		if err := writeAsKubelet(patch, subresource); err != nil {
			t.Fatal(err)
		}
	}
	writeAsKubelet = func(patch any, subresource string) error {
		// Its own context: the cleanup writes after the test's has ended.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		file := filepath.Join(dir, "patch.json")
		args := []string{"patch", "node", n2.Name, "--type=merge", "--patch-file=" + file}
		if subresource != "status" {
			b, err := json.Marshal(patch)
			if err != nil {
				return err
			}
			if err := os.WriteFile(file, b, 0o600); err != nil {
				return err
			}
			_, err = c.KubectlAs(ctx, n2.Kubeconfig, cacheDir, "", args...)
			return err
		}
		// kubectl patch of a subresource GETs it first, which the node
		// authorizer does not grant a kubelet; it may update its own
		// Node's status, as the kubelet itself does: a PUT of the Node
		// with the patch's status. The PUT carries the metadata read with
		// it, so it is conditional on that read's resourceVersion and
		// read again on a conflict: an unconditional one would put back
		// an annotation node 2's agent has replaced since (the previous
		// attack's), and test that instead of the forged address.
		for {
			out, err := c.Kubectl(ctx, "", "get", "node", n2.Name, "-o", "json")
			if err != nil {
				return err
			}
			var node map[string]any
			if err := json.Unmarshal([]byte(out), &node); err != nil {
				return err
			}
			for k, v := range patch.(map[string]any)["status"].(map[string]any) {
				node["status"].(map[string]any)[k] = v
			}
			b, err := json.Marshal(node)
			if err != nil {
				return err
			}
			if err := os.WriteFile(file, b, 0o600); err != nil {
				return err
			}
			_, err = c.KubectlAs(ctx, n2.Kubeconfig, cacheDir, "", "replace", "--raw", "/api/v1/nodes/"+n2.Name+"/status", "-f", file)
			if err == nil || !strings.Contains(err.Error(), "the object has been modified") {
				return err
			}
		}
	}
	// The kubelet sets its addresses again at its next status update;
	// the test does not wait for it.
	var addrs []map[string]string
	if err := json.Unmarshal([]byte(kubectl(t, "", "get", "node", n2.Name, "-o", "jsonpath={.status.addresses}")), &addrs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { asKubelet(map[string]any{"status": map[string]any{"addresses": addrs}}, "status") })
	hosts := make([]string, 5000)
	for i := range hosts {
		hosts[i] = netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)}).String() + "/32"
	}
	forged := netip.MustParseAddr("198.51.100.7") // inside node 2's routedNet
	// Each value keeps node 2's own prefix, so that what changes on node 1
	// is only what the bounds let through.
	own := routedNet.String() + ","
	annotate := func(v string) any {
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{"podwire.io/routes": v}}}
	}
	for _, attack := range []struct {
		name    string
		patch   any
		sub     string
		overCap bool
		// refused is what node 1's agent logs when it reads the data.
		refused string
	}{
		{"routes 0.0.0.0/0,::/0", annotate(own + "0.0.0.0/0,::/0"), "", false, "0.0.0.0/0 of node " + n2.Name + ": a default route"},
		{"routes 0.0.0.0/1", annotate(own + "0.0.0.0/1"), "", false, "0.0.0.0/1 of node " + n2.Name + ": outside forwarding.routablePrefixes"},
		{"5,000 host routes", annotate(own + strings.Join(hosts, ",")), "", true, "node " + n2.Name + ": 5001 prefixes in podwire.io/routes, over the cap"},
		{"InternalIP " + forged.String(), map[string]any{"status": map[string]any{"addresses": []map[string]string{
			{"type": "InternalIP", "address": n2.IP.String()}, {"type": "InternalIP", "address": n2.IP6.String()},
			{"type": "InternalIP", "address": forged.String()}, {"type": "Hostname", "address": n2.Name},
		}}}, "status", false, "node " + n2.Name + ": InternalIP " + forged.String() + " lies inside forwarding.routablePrefixes"},
	} {
		// After the last attack, node 2's agent has put its annotation
		// back and node 1 routes the router's prefix again. Node 1's
		// routes alone do not tell: during an attack they come back
		// whenever one of node 1's ticks falls between node 2's agent's
		// write and the kubelet's next one.
		if err := cnitest.Eventually(30*time.Second, func() error {
			if v := nodeAnnotation(t, n2.Name, "podwire.io/routes"); v != routedNet.String() {
				return fmt.Errorf("%s's podwire.io/routes is %.80q, want %s", n2.Name, v, routedNet)
			}
			if r := nodeRoutes(t, n1); r != routesBefore {
				return fmt.Errorf("%s routes:\n%s\nwant:\n%s", n1.Name, r, routesBefore)
			}
			return nil
		}); err != nil {
			t.Fatalf("before %s: %v", attack.name, err)
		}
		// Eight seconds at least, two of the agents' ticks and more, and
		// until node 1's agent has logged the data refused: the proof
		// that the kubelet's writes reached it. The kubelet writes again
		// and again: node 2's agent puts its own value back at each of
		// its ticks, and node 1's ticks may fall on that value a few
		// times in a row. The test checks each second what must hold.
		asKubelet(attack.patch, attack.sub)
		cpu0, t0 := agentCPU(), time.Now()
		stop := make(chan struct{})
		written := make(chan error, 1)
		go func() {
			for {
				select {
				case <-stop:
					written <- nil
					return
				default:
				}
				if err := writeAsKubelet(attack.patch, attack.sub); err != nil {
					written <- err
					return
				}
			}
		}()
		for seen := false; !seen; {
			time.Sleep(time.Second)
			holds(attack.name, attack.overCap)
			if time.Since(t0) < window {
				continue
			}
			logs := agentLogs(t, ctx, n1.Name)
			if seen = strings.Contains(logs, attack.refused); !seen && time.Since(t0) > time.Minute {
				t.Fatalf("%s: %s's agent log has no %q a minute on: the kubelet's writes never reached it?\n%s", attack.name, n1.Name, attack.refused, logs)
			}
		}
		close(stop)
		if err := <-written; err != nil {
			t.Fatalf("%s: %v", attack.name, err)
		}
		attackCPU := (agentCPU() - cpu0) / time.Since(t0).Seconds()
		t.Logf("%s written by %s's kubelet for %v, refused by %s's agent: its pod still leaves from %s and %s, its routes %s, its agent %.2f%% of a core",
			attack.name, n2.Name, time.Since(t0).Round(time.Second), n1.Name,
			egress4, egress6, map[bool]string{false: "unchanged", true: "without any of them (the Node is over the cap)"}[attack.overCap], 100*attackCPU)
		// Flat: within two percent of a core of idle, about what one
		// more repair process a tick would cost.
		if attackCPU > idleCPU+0.02 {
			t.Errorf("%s: %s's agent used %.2f%% of a core, idle %.2f%%", attack.name, n1.Name, 100*attackCPU, 100*idleCPU)
		}
	}
}

// agentLogs is the log of the podwire agent on node.
func agentLogs(t *testing.T, ctx context.Context, node string) string {
	t.Helper()
	out, err := c.Kubectl(ctx, "", "-n", agentNS, "logs", agentPods(t, node, "{.items[0].metadata.name}"))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// agentPods is the podwire agent pods of node, printed with the kubectl
// JSONPath template jsonpath, trimmed.
func agentPods(t *testing.T, node, jsonpath string) string {
	t.Helper()
	return strings.TrimSpace(kubectl(t, "", "-n", agentNS, "get", "pods", "-l", "app.kubernetes.io/name=podwire-agent",
		"--field-selector", "spec.nodeName="+node, "-o", "jsonpath="+jsonpath))
}
