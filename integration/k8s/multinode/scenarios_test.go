package multinode

// The multi-node scenarios (per-node egress, cross-node sources), each proven with packets between
// pods on different nodes and the network outside the cluster.

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
	"github.com/podwire/podwire/integration/packets"
)

const annEgressIP = "podwire.io/egress-ip"

// egressFile is where a node's agent writes its Node's egress annotation
// (in the node's /run/podwire).
const egressFile = "node-egress-ip.cache"

// setEgress gives node n the egress addresses v4 and v6 on its uplink and
// announces them with `kubectl annotate node N podwire.io/egress-ip=V4,V6`,
// then waits until n's agent has written them into its stateDir, where the
// plugin and `podwire repair` read them. Both are undone when the test
// ends.
func setEgress(t *testing.T, n *cluster.Node, v4, v6 netip.Addr) {
	t.Helper()
	nodeAddrs(t, n, netip.PrefixFrom(v4, cluster.LinkPrefix.Bits()), netip.PrefixFrom(v6, cluster.LinkPrefix6.Bits()))
	annotateEgress(t, n, v4.String()+","+v6.String())
}

// annotateEgress sets n's egress annotation to value and waits until n's
// agent has written it; the annotation is removed when the test ends.
func annotateEgress(t *testing.T, n *cluster.Node, value string) {
	t.Helper()
	path := filepath.Join(n.Path("/run/podwire"), egressFile)
	t.Cleanup(func() { kubectl(t, "", "annotate", "node", n.Name, annEgressIP+"-") })
	kubectl(t, "", "annotate", "node", n.Name, "--overwrite", annEgressIP+"="+value)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), strings.Split(value, ",")[0]) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the agent of %s never wrote %q into %s: %v\n%s", n.Name, value, path, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// egressOnEveryNode gives every node its egress addresses (egressIPs).
func egressOnEveryNode(t *testing.T) {
	t.Helper()
	for i, n := range c.Nodes {
		v4, v6 := egressIPs(i)
		setEgress(t, n, v4, v6)
	}
}

// TestCrossNodePodSources: with egress IPs configured on both nodes, a pod
// on node 1 talks to a pod on node 2 in both families, directly and
// through a dual-stack ClusterIP Service (kube-proxy's nftables DNAT), and
// the server sees the client pod's own address each time: flannel's
// masquerade and podwire's egress SNAT both leave cluster traffic alone.
func TestCrossNodePodSources(t *testing.T) {
	needCluster(t)
	egressOnEveryNode(t)
	const port = 7100
	client := runPod(t, "default", "xnode-client", c.Nodes[0], nil)
	server := runPod(t, "default", "xnode-server", c.Nodes[1], map[string]string{"app": "xnode-server"})
	udpEchoServer(t, server.netns, port)

	for _, dst := range []netip.Addr{server.ip4, server.ip6} {
		want := client.ip4
		if dst.Is6() {
			want = client.ip6
		}
		if got := sourceSeen(t, client, netip.AddrPortFrom(dst, port)); got != want {
			t.Errorf("pod %s on %s seen as %s by the pod %s on %s, want its own %s", client.name, client.node.Name, got, dst, server.node.Name, want)
		} else {
			t.Logf("to pod %s on %s: source %s (the client pod's own)", dst, server.node.Name, got)
		}
	}

	kubectl(t, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: xnode
  namespace: default
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  selector:
    app: xnode-server
  ports:
  - protocol: UDP
    port: %d
    targetPort: %d
`, port, port), "apply", "-f", "-")
	t.Cleanup(func() { kubectl(t, "", "delete", "service", "-n", "default", "xnode", "--ignore-not-found") })
	ips := strings.Fields(kubectl(t, "", "get", "service", "-n", "default", "xnode", "-o", "jsonpath={.spec.clusterIPs[*]}"))
	if len(ips) != 2 {
		t.Fatalf("the Service has cluster IPs %v, want one per family", ips)
	}
	for _, s := range ips {
		vip := netip.MustParseAddr(s)
		want := client.ip4
		if vip.Is6() {
			want = client.ip6
		}
		if got := sourceSeen(t, client, netip.AddrPortFrom(vip, port)); got != want {
			t.Errorf("through ClusterIP %s the server on %s saw %s, want the client pod's own %s", vip, server.node.Name, got, want)
		} else {
			t.Logf("through ClusterIP %s to the pod on %s: source %s (the client pod's own)", vip, server.node.Name, got)
		}
	}
}

// TestPerNodeEgress: pods on node 1 leave from node 1's egress IPs and pods
// on node 2 from node 2's, as a server outside sees them, in IPv4 and IPv6.
// When node 2's annotation changes, new connections of node 2's existing
// pod leave from the new IPs within 10 s, with no pod created.
func TestPerNodeEgress(t *testing.T) {
	needCluster(t)
	egressOnEveryNode(t)
	const port = 7200
	packets.EchoServer(t, c.OutsideNetNS, netip.AddrPortFrom(serverIP, port))
	packets.EchoServer(t, c.OutsideNetNS, netip.AddrPortFrom(serverIP6, port))
	var pods []*pod
	for i, n := range c.Nodes {
		pods = append(pods, runPod(t, "default", fmt.Sprintf("egress-%d", i+1), n, nil))
	}
	for i, p := range pods {
		v4, v6 := egressIPs(i)
		for _, want := range []netip.Addr{v4, v6} {
			dst := serverIP
			if want.Is6() {
				dst = serverIP6
			}
			if got := sourceSeen(t, p, netip.AddrPortFrom(dst, port)); got != want {
				t.Errorf("pod %s on %s reached %s from %s, want its node's egress IP %s", p.name, p.node.Name, dst, got, want)
			} else {
				t.Logf("pod %s on %s to %s: source %s (its node's egress IP)", p.name, p.node.Name, dst, got)
			}
		}
	}

	// Node 2 moves to new addresses; its pod is not touched.
	n2, p2 := c.Nodes[1], pods[1]
	new4, new6 := netip.MustParseAddr("10.99.0.30"), netip.MustParseAddr("fd99::30")
	nodeAddrs(t, n2, netip.PrefixFrom(new4, 24), netip.PrefixFrom(new6, 64))
	changed := time.Now()
	kubectl(t, "", "annotate", "node", n2.Name, "--overwrite", annEgressIP+"="+new4.String()+","+new6.String())
	for _, want := range []netip.Addr{new4, new6} {
		dst := serverIP
		if want.Is6() {
			dst = serverIP6
		}
		var got netip.Addr
		for time.Since(changed) < 10*time.Second {
			if got = sourceSeen(t, p2, netip.AddrPortFrom(dst, port)); got == want {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got != want {
			t.Fatalf("10 s after the annotation of %s changed, its pod still reaches %s from %s, want %s", n2.Name, dst, got, want)
		}
		t.Logf("after the annotation change, pod %s reaches %s from %s (%.1fs after the change)", p2.name, dst, got, time.Since(changed).Seconds())
	}
}
