package multinode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// The cluster's DNS is CoreDNS (PODWIRE_COREDNS, scripts/coredns-build.sh's
// directory) as kubeadm deploys it, installed by the first test that needs
// it (needDNS) and left running for the ones after it: its two replicas
// are pods of the podwire chain like any other.

var (
	dnsOnce sync.Once
	dnsErr  error
)

// needDNS installs CoreDNS once (its image pushed to the run's registry,
// then cluster.InstallCoreDNS), and fails t if that failed.
func needDNS(t *testing.T) {
	t.Helper()
	dnsOnce.Do(func() {
		dir := os.Getenv("PODWIRE_COREDNS")
		if dir == "" {
			dnsErr = fmt.Errorf("needs PODWIRE_COREDNS, the directory of scripts/coredns-build.sh: run it with make test-k8s")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		img, err := cluster.CoreDNSImage(dir)
		if err != nil {
			dnsErr = err
			return
		}
		ref, err := c.Push(ctx, img, "coredns/coredns:v1.15.0")
		if err != nil {
			dnsErr = err
			return
		}
		fmt.Printf("registry: pushed %s\n", ref)
		fmt.Println("  " + cluster.VersionLine(ctx, "coredns", dir+"/coredns", "-version"))
		dnsErr = c.InstallCoreDNS(ctx, ref)
	})
	if dnsErr != nil {
		t.Fatal(dnsErr)
	}
}

// TestClusterDNS proves the cluster's DNS through podwire's chain: a pod on
// node 1 running agnhost resolves, with its own resolver and the
// resolv.conf the kubelet gave it (clusterDNS, kube-dns's IPv4 address,
// and the search path of its namespace), a Service by its short name and kubernetes.default, and
// connects to each over TCP (the Service's backend is a pod on node 2).
// From the same pod's network namespace, each kube-dns address (IPv4 and
// IPv6) answers the A and AAAA records of both names with the Services'
// ClusterIPs.
func TestClusterDNS(t *testing.T) {
	needCluster(t)
	needDNS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const name, port = "dns-echo", 8080
	server := runPod(t, "default", "dns-server", c.Nodes[1], map[string]string{"app": name})
	ln, err := packets.TCPListen(server.netns, port)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	kubectl(t, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: default
spec:
  ipFamilyPolicy: RequireDualStack
  selector:
    app: %s
  ports:
  - protocol: TCP
    port: 80
    targetPort: %d
`, name, name, port), "apply", "-f", "-")
	t.Cleanup(func() { kubectl(t, "", "delete", "service", "-n", "default", name, "--ignore-not-found") })

	client := agnhostPod(t, ctx, "default", "dns-client", c.Nodes[0])
	servers := strings.Split(strings.TrimSpace(kubectl(t, "", "exec", "-n", "default", client.name, "--", "/agnhost", "dns-server-list")), ",")
	if want := []string{c.ClusterDNS()[0].String()}; !slices.Equal(servers, want) {
		t.Errorf("the pod's nameservers are %v, want the kubelets' clusterDNS %v", servers, want)
	}
	for _, target := range []string{fmt.Sprintf("%s:80", name), "kubernetes.default.svc.cluster.local:443"} {
		// The Service's endpoints and CoreDNS's view of them settle
		// shortly after the apply: retried for a while.
		var out string
		var err error
		for try := 0; try < 20; try++ {
			if out, err = c.Kubectl(ctx, "", "exec", "-n", "default", client.name, "--",
				"/agnhost", "connect", "--timeout=3s", target); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			t.Errorf("agnhost connect %s from a pod on %s: %v\n%s", target, c.Nodes[0].Name, err, out)
		} else {
			t.Logf("agnhost connect %s: resolved and connected", target)
		}
	}

	for _, svc := range []struct{ namespace, name string }{{"default", name}, {"default", "kubernetes"}} {
		ips := strings.Fields(kubectl(t, "", "get", "service", "-n", svc.namespace, svc.name, "-o", "jsonpath={.spec.clusterIPs[*]}"))
		fqdn := svc.name + "." + svc.namespace + ".svc." + cluster.ClusterDomain
		for _, dns := range c.ClusterDNS() {
			got, err := lookupIn(ctx, client.netns, dns, fqdn)
			if err != nil {
				t.Errorf("%s from %s: %v", fqdn, dns, err)
				continue
			}
			if !slices.Equal(got, ips) {
				t.Errorf("%s from %s = %v, want the Service's ClusterIPs %v", fqdn, dns, got, ips)
			}
			t.Logf("%s from %s: %v", fqdn, dns, got)
		}
	}
}

// agnhostPod runs `agnhost pause` (the image setUp pushed) in a pod on node
// n, waits until it is Ready, and deletes it when the test ends.
func agnhostPod(t *testing.T, ctx context.Context, namespace, name string, n *cluster.Node) *pod {
	t.Helper()
	kubectl(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  nodeName: %s
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s/e2e-test-images/agnhost:2.59
    args: ["pause"]
`, name, namespace, n.Name, cluster.RegistryHost), "apply", "-f", "-")
	t.Cleanup(func() {
		kubectl(t, "", "delete", "pod", "-n", namespace, name, "--ignore-not-found", "--wait=true", "--timeout=90s")
	})
	p, err := waitPod(ctx, namespace, name, n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lookupIn asks the DNS server at dns (port 53), from the network namespace
// nsPath, for the A and AAAA records of fqdn, and returns the addresses,
// IPv4 first (as a Service lists its ClusterIPs here); a family without
// records adds none.
func lookupIn(ctx context.Context, nsPath string, dns netip.Addr, fqdn string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		// The resolver's goroutines run on any thread: the socket is
		// made in the pod's netns, where it stays.
		var conn net.Conn
		err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
			var err error
			conn, err = (&net.Dialer{}).DialContext(ctx, network, netip.AddrPortFrom(dns, 53).String())
			return err
		})
		return conn, err
	}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out []string
	for _, family := range []string{"ip4", "ip6"} {
		addrs, err := r.LookupNetIP(ctx, family, fqdn)
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			continue // none of this family: a single-stack Service
		}
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			out = append(out, a.String())
		}
	}
	return out, nil
}
