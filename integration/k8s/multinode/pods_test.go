package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// Pods of the tests run the pause image (imported on every node) as their
// container too: every packet of a scenario is sent and received by the
// test itself inside the pod's network namespace, found through the node's
// CRI from the pod's UID.

// pod is a running pod as the test sees it.
type pod struct {
	namespace, name string
	node            *cluster.Node
	uid             string
	ip4, ip6        netip.Addr
	netns           string // /proc/PID/ns/net of its sandbox
}

func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	return c.MustKubectl(t, stdin, args...)
}

// runPod creates a pod on node n with labels, waits until it is Ready, and
// deletes it when the test ends.
func runPod(t *testing.T, namespace, name string, n *cluster.Node, labels map[string]string) *pod {
	t.Helper()
	start := time.Now()
	t.Cleanup(func() {
		kubectl(t, "", "delete", "pod", "-n", namespace, name, "--ignore-not-found", "--wait=true", "--timeout=90s")
	})
	p, err := startPod(context.Background(), namespace, name, n, labels)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s/%s on %s Ready in %v: %s %s", namespace, name, n.Name, time.Since(start).Round(time.Millisecond), p.ip4, p.ip6)
	return p
}

// createPod creates a pod on node n with labels and annotations through
// the API, and returns without waiting for it. It talks to the apiserver
// directly (cluster.API), not through kubectl: the churn of
// TestAgentFootprint creates pods as fast as two cores allow.
func createPod(ctx context.Context, namespace, name string, n *cluster.Node, labels, annotations map[string]string, tolerate ...string) error {
	grace := int64(1)
	automount := false
	spec := map[string]any{
		"nodeName": n.Name, "automountServiceAccountToken": automount, "terminationGracePeriodSeconds": grace,
		"containers": []map[string]any{{"name": "main", "image": cluster.PauseImage, "imagePullPolicy": "Never"}},
	}
	var tolerations []map[string]any
	for _, key := range tolerate {
		tolerations = append(tolerations, map[string]any{"key": key, "operator": "Exists"})
	}
	if tolerations != nil {
		spec["tolerations"] = tolerations
	}
	manifest, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
		"spec":     spec,
	})
	if err != nil {
		return err
	}
	_, err = c.API(ctx, "POST", "/api/v1/namespaces/"+namespace+"/pods", manifest)
	return err
}

// startPod creates a pod on node n with labels, tolerating the taint keys
// tolerate (createPod), and waits until it is Ready, with an address of
// each family.
func startPod(ctx context.Context, namespace, name string, n *cluster.Node, labels map[string]string, tolerate ...string) (*pod, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := createPod(ctx, namespace, name, n, labels, nil, tolerate...); err != nil {
		return nil, err
	}
	return waitPod(ctx, namespace, name, n)
}

// waitPod waits until the pod namespace/name on node n is Ready, with an
// address of each family, and returns it.
func waitPod(ctx context.Context, namespace, name string, n *cluster.Node) (*pod, error) {
	path := "/api/v1/namespaces/" + namespace + "/pods"
	var obj struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
			PodIPs     []struct{ IP string }           `json:"podIPs"`
		} `json:"status"`
	}
	for ready := false; !ready; {
		b, err := c.API(ctx, "GET", path+"/"+name, nil)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &obj); err != nil {
			return nil, err
		}
		for _, cond := range obj.Status.Conditions {
			ready = ready || (cond.Type == "Ready" && cond.Status == "True")
		}
		if !ready {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("pod %s/%s not Ready: %w", namespace, name, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	p := &pod{namespace: namespace, name: name, node: n, uid: obj.Metadata.UID}
	for _, ip := range obj.Status.PodIPs {
		a, err := netip.ParseAddr(ip.IP)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: IP %q: %v", namespace, name, ip.IP, err)
		}
		if a.Is4() {
			p.ip4 = a
		} else {
			p.ip6 = a
		}
	}
	if !p.ip4.IsValid() || !p.ip6.IsValid() {
		return nil, fmt.Errorf("pod %s/%s is not dual-stack: %v", namespace, name, obj.Status.PodIPs)
	}
	var err error
	if p.netns, _, err = n.PodNetNS(ctx, p.uid); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %v", namespace, name, err)
	}
	return p, nil
}

// deletePod deletes a pod through the API without waiting for it to go.
func deletePod(ctx context.Context, namespace, name string) error {
	_, err := c.API(ctx, "DELETE", "/api/v1/namespaces/"+namespace+"/pods/"+name, nil)
	return err
}

// udpEchoServer answers every datagram to port in nsPath (both families)
// with the source address it saw, until the test ends. For a namespace
// with one address of each family (a pod's).
func udpEchoServer(t *testing.T, nsPath string, port int) {
	t.Helper()
	packets.EchoServer(t, nsPath, netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(port)))
}

// sourceSeen sends a datagram from p to dst and returns the source the echo
// server there saw.
func sourceSeen(t *testing.T, p *pod, dst netip.AddrPort) netip.Addr {
	t.Helper()
	a, err := exchangeFrom(p.netns, dst)
	if err != nil {
		t.Fatalf("%s on %s: %v", p.name, p.node.Name, err)
	}
	return a
}

// exchangeFrom sends a datagram from nsPath to the echo server at dst and
// returns the source it saw.
func exchangeFrom(nsPath string, dst netip.AddrPort) (netip.Addr, error) {
	src, err := packets.Exchange(nsPath, dst, 15*time.Second)
	if err != nil {
		return netip.Addr{}, err
	}
	a, err := netip.ParseAddr(src)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("echo from %s: bad source %q", dst, src)
	}
	return a, nil
}

// addServerAddrs puts serverIP and serverIP6 on the outside network's
// uplink: the nodes' default routes lead there.
func addServerAddrs() error {
	return uplinkAddrs(c.OutsideNetNS, netip.PrefixFrom(serverIP, 32), netip.PrefixFrom(serverIP6, 128))
}

// uplinkAddrs adds prefixes to eth0 in the netns at nsPath: the uplink of
// a node or of the outside network.
func uplinkAddrs(nsPath string, prefixes ...netip.Prefix) error {
	return ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		for _, p := range prefixes {
			if err := addrOn("eth0", p); err != nil {
				return err
			}
		}
		return nil
	})
}

// nodeAddrs adds prefixes to node n's uplink until t ends.
func nodeAddrs(t *testing.T, n *cluster.Node, prefixes ...netip.Prefix) {
	t.Helper()
	if err := uplinkAddrs(n.NetNS, prefixes...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.WithNetNSPath(n.NetNS, func(ns.NetNS) error {
			for _, p := range prefixes {
				addrOff("eth0", p)
			}
			return nil
		})
	})
}

// addrOn adds p to link (no DAD: the run's addresses are unique).
func addrOn(link string, p netip.Prefix) error {
	l, err := netlinksafe.LinkByName(link)
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: netipNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := netlink.AddrAdd(l, a); err != nil {
		return fmt.Errorf("failed to add %s to %s: %w", p, link, err)
	}
	return nil
}

// addrOff removes p from link.
func addrOff(link string, p netip.Prefix) error {
	l, err := netlinksafe.LinkByName(link)
	if err != nil {
		return err
	}
	return netlink.AddrDel(l, &netlink.Addr{IPNet: netipNet(p)})
}

func netipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// listen is a UDP sink on port in p's netns, closed when t ends, and the
// address datagrams to it go to: p's IPv4 address and port.
func listen(t *testing.T, p *pod, port uint16) (*packets.Sink, netip.AddrPort) {
	t.Helper()
	sink, err := packets.NewSink(p.netns, int(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	return sink, netip.AddrPortFrom(p.ip4, port)
}

// checkedPod proves with packets that p is source-checked: from p's netns
// three datagrams forged from forged and three from its own IPv4 address go
// to the sink at to; its own must arrive, none forged may. Failures are
// reported with t.Errorf, naming why as what.
func checkedPod(t *testing.T, sink *packets.Sink, to netip.AddrPort, p *pod, forged netip.Addr, why string) {
	t.Helper()
	if err := packets.SendFrom(p.netns, forged, to, "forged-"+p.name, 3); err != nil {
		t.Fatal(err)
	}
	if err := packets.SendFrom(p.netns, p.ip4, to, "genuine-"+p.name, 3); err != nil {
		t.Fatal(err)
	}
	if !sink.WaitGot(p.ip4, "genuine-"+p.name, 10*time.Second) {
		t.Errorf("%s on %s: its own datagrams did not arrive", p.name, p.node.Name)
	}
	if sink.Got(forged, "forged-"+p.name) {
		t.Errorf("%s on %s, %s, is not checked: its datagram forged from %s arrived", p.name, p.node.Name, why, forged)
	}
}
