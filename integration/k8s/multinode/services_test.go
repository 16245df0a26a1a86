package multinode

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// azureProbe is the source of Azure's IPv6 load-balancer health probe (on
// AKS it is also the nodes' IPv6 router); probeSNAT's preset "azure".
var azureProbe = netip.MustParseAddr("fe80::1234:5678:9abc")

// nodePortService creates a Service of type NodePort named name for the
// pods labelled app=name, one port (protocol, port 80 to targetPort), in
// families, with externalTrafficPolicy policy, and returns its node port.
// It is deleted when the test ends (t may be nil: then never).
func nodePortService(t *testing.T, ctx context.Context, name, protocol string, targetPort int, families []string, policy string) (int, error) {
	fam := "SingleStack"
	if len(families) == 2 {
		fam = "RequireDualStack"
	}
	m := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: default
spec:
  type: NodePort
  externalTrafficPolicy: %s
  ipFamilyPolicy: %s
  ipFamilies: [%s]
  selector:
    app: %s
  ports:
  - protocol: %s
    port: 80
    targetPort: %d
`, name, policy, fam, strings.Join(families, ", "), name, protocol, targetPort)
	if _, err := c.Kubectl(ctx, m, "apply", "-f", "-"); err != nil {
		return 0, err
	}
	if t != nil {
		t.Cleanup(func() { kubectl(t, "", "delete", "service", "-n", "default", name, "--ignore-not-found") })
	}
	out, err := c.Kubectl(ctx, "", "get", "service", "-n", "default", name, "-o", "jsonpath={.spec.ports[0].nodePort}")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// probe opens a TCP connection from the outside network with source
// azureProbe (a link-local address of the outside's uplink, as on AKS,
// where the probe comes from the nodes' router) to dst, and reports
// whether the handshake completed within timeout.
func probe(dst netip.AddrPort, timeout time.Duration) (bool, error) {
	return packets.TCPHandshake(c.OutsideNetNS, azureProbe, "eth0", dst, timeout)
}

// addProbeSource gives the outside network's uplink azureProbe.
func addProbeSource() error {
	return uplinkAddrs(c.OutsideNetNS, netip.PrefixFrom(azureProbe, 64))
}

// probeControl is the AKS probe measured before podwire is installed
// (probeControlRun): whether it was answered, and the error that stopped
// the measurement, if any.
var probeControl struct {
	ran, answered bool
	err           error
}

// probeControlRun is TestAKSProbe's control, run by setUp on the same
// cluster before podwire is in any chain (so no probe SNAT): a backend on
// node 2 behind an IPv6 NodePort Service with externalTrafficPolicy
// Cluster, probed from azureProbe on node 1's port. The backend, a pod
// podwire never wired, is deleted before podwire is installed.
func probeControlRun(ctx context.Context) {
	probeControl.ran = true
	const name, port = "probe-control", 8080
	if err := addProbeSource(); err != nil {
		probeControl.err = err
		return
	}
	defer c.Kubectl(ctx, "", "delete", "service,pod", "-n", "default", name, "--ignore-not-found", "--wait=true")
	nodePort, err := nodePortService(nil, ctx, name, "TCP", port, []string{"IPv6"}, "Cluster")
	if err != nil {
		probeControl.err = err
		return
	}
	// Before podwire is installed the nodes carry the startup taint,
	// NoExecute: the control's backend tolerates it.
	backend, err := startPod(ctx, "default", name, c.Nodes[1], map[string]string{"app": name}, startupTaint)
	if err != nil {
		probeControl.err = err
		return
	}
	ln, err := packets.TCPListen(backend.netns, port)
	if err != nil {
		probeControl.err = err
		return
	}
	defer ln.Close()
	// The Service answers from inside the cluster first: what the probe
	// misses is then the probe's own path, not a Service not programmed yet.
	if err := waitServiceFromNode(ctx, c.Nodes[0], netip.AddrPortFrom(c.Nodes[0].IP6, uint16(nodePort))); err != nil {
		probeControl.err = err
		return
	}
	probeControl.answered, probeControl.err = probe(netip.AddrPortFrom(c.Nodes[0].IP6, uint16(nodePort)), 3*time.Second)
}

// waitServiceFromNode waits until a TCP connection from node n's own
// netns to dst completes (kube-proxy has programmed the Service).
func waitServiceFromNode(ctx context.Context, n *cluster.Node, dst netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var err error
		ns.WithNetNSPath(n.NetNS, func(ns.NetNS) error {
			var conn net.Conn
			conn, err = (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", dst.String())
			if err == nil {
				conn.Close()
			}
			return nil
		})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s never answered from %s: %v", dst, n.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAKSProbe is the seed scenario on two nodes, IPv6 end to end: a
// NodePort Service with externalTrafficPolicy Cluster has its only backend
// on node 2; the probe from fe80::1234:5678:9abc reaches node 1's port and
// is answered, because podwire's probe SNAT (preset azure) gives it a
// routable source before routing, so node 1 forwards it to node 2 and the
// answer comes back to the link-local address. The control, the same
// probe on the same cluster before podwire was installed, went
// unanswered.
func TestAKSProbe(t *testing.T) {
	needCluster(t)
	if !probeControl.ran || probeControl.err != nil {
		t.Fatalf("the control did not run: %v", probeControl.err)
	}
	if probeControl.answered {
		t.Fatalf("control: the probe from %s was answered with no probe SNAT, so this test proves nothing", azureProbe)
	}
	const name, port = "probe", 8080
	ctx := context.Background()
	nodePort, err := nodePortService(t, ctx, name, "TCP", port, []string{"IPv6"}, "Cluster")
	if err != nil {
		t.Fatal(err)
	}
	backend := runPod(t, "default", name, c.Nodes[1], map[string]string{"app": name})
	ln, err := packets.TCPListen(backend.netns, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	dst := netip.AddrPortFrom(c.Nodes[0].IP6, uint16(nodePort))
	if err := waitServiceFromNode(ctx, c.Nodes[0], dst); err != nil {
		t.Fatal(err)
	}
	ok, err := probe(dst, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("the probe from %s to %s (node %s, backend on %s) was not answered with probeSNAT on", azureProbe, dst, c.Nodes[0].Name, c.Nodes[1].Name)
	}
	t.Logf("probe from %s to %s answered by the backend on %s (control without podwire: unanswered)", azureProbe, dst, c.Nodes[1].Name)
}

// TestSourceIPPreserved (ESIPP): a NodePort Service with
// externalTrafficPolicy Local and its backend on node 2, egress IPs
// configured on both nodes: a client outside the cluster reaches the
// backend through node 2's port in both families, and the backend sees
// the client's own address (the answer of a connection that came in is
// never SNATed to the egress IP).
func TestSourceIPPreserved(t *testing.T) {
	needCluster(t)
	egressOnEveryNode(t)
	const name, port = "esipp", 7300
	ctx := context.Background()
	nodePort, err := nodePortService(t, ctx, name, "UDP", port, []string{"IPv4", "IPv6"}, "Local")
	if err != nil {
		t.Fatal(err)
	}
	backend := runPod(t, "default", name, c.Nodes[1], map[string]string{"app": name})
	udpEchoServer(t, backend.netns, port)
	for _, dst := range []netip.Addr{c.Nodes[1].IP, c.Nodes[1].IP6} {
		want := cluster.OutsideIP
		if dst.Is6() {
			want = cluster.OutsideIP6
		}
		src, err := exchangeFrom(c.OutsideNetNS, netip.AddrPortFrom(dst, uint16(nodePort)))
		if err != nil {
			t.Fatalf("the client outside did not reach the backend through %s:%d: %v", dst, nodePort, err)
		}
		if src != want {
			t.Errorf("through %s:%d the backend saw %s, want the client's own %s", dst, nodePort, src, want)
		} else {
			t.Logf("through node port %s:%d the backend on %s saw the client's own %s", dst, nodePort, c.Nodes[1].Name, src)
		}
	}
}
