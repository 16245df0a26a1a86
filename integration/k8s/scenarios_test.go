package k8s

// The single-node scenarios, in the order they run. Each proves its claim
// with packets between the pods, the node and the outside network.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

const (
	annForwarding = "podwire.io/forwarding"
	annRoutes     = "podwire.io/routes"
	annEgressIP   = "podwire.io/egress-ip"
)

// forgedSources are sources an ordinary pod must not send from: another
// pod's would-be address on the same node (in its pod range, beyond what
// the tests use), and an address from nowhere; of the leg's family.
func forgedSources() []netip.Addr {
	other := n1.PodCIDR.Addr()
	for range 250 {
		other = other.Next()
	}
	return []netip.Addr{other, fam.nowhere}
}

// spoofFrom sends, from p, datagrams with each forged source and then with
// its own to a sink outside the node on port; it returns whether the
// genuine ones arrived and which forged sources did. The genuine datagrams
// go last on the same path, so once they are in, the forged ones had every
// chance to be.
func spoofFrom(t *testing.T, p *pod, port int) (genuine bool, passed []netip.Addr) {
	t.Helper()
	sink := newUDPSink(t, c.OutsideNetNS, port)
	dst := netip.AddrPortFrom(fam.outsideIP, uint16(port))
	for _, src := range forgedSources() {
		if err := packets.SendFrom(p.netns, src, dst, "forged-"+p.name, 5); err != nil {
			t.Fatal(err)
		}
	}
	if err := packets.SendFrom(p.netns, p.ip, dst, "genuine-"+p.name, 5); err != nil {
		t.Fatal(err)
	}
	genuine = sink.WaitGot(p.ip, "genuine-"+p.name, 5*time.Second)
	time.Sleep(200 * time.Millisecond)
	for _, src := range forgedSources() {
		if sink.Got(src, "forged-"+p.name) {
			passed = append(passed, src)
		}
	}
	return genuine, passed
}

// TestSourceCheck: an ordinary pod created through the API reaches the
// outside from its own address; its forged sources are dropped.
func TestSourceCheck(t *testing.T) {
	needCluster(t)
	p := runPod(t, "default", "plain", nil)
	genuine, passed := spoofFrom(t, p, 7001)
	if !genuine {
		t.Fatalf("the pod's own datagrams from %s did not reach %s", p.ip, fam.outsideIP)
	}
	if len(passed) > 0 {
		t.Fatalf("forged sources %v of an ordinary pod reached the outside", passed)
	}
	t.Logf("genuine source %s passed, forged %v dropped", p.ip, forgedSources())
}

// TestForwardingDeployment: a Deployment of forwarding pods in a namespace
// that forwarding.namespaces allows, with podwire.io/routes in its pod
// template; a client network behind the pod reaches a server outside the
// node and back, with its own source address.
func TestForwardingDeployment(t *testing.T) {
	needCluster(t)
	createNamespace(t, allowedNS)
	manifest := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: router
  namespace: %s
spec:
  replicas: 1
  selector:
    matchLabels:
      app: router
  template:
    metadata:
      labels:
        app: router
%s    spec:
%s`, allowedNS, annotationsYAML(map[string]string{annForwarding: "true", annRoutes: fam.routedNet.String()}, "      "), podSpec("      "))
	kubectl(t, manifest, "apply", "-f", "-")
	var router *pod
	t.Cleanup(func() {
		kubectl(t, "", "delete", "deployment", "-n", allowedNS, "router", "--wait=true", "--timeout=60s")
		// Its pods go with the ReplicaSet, asynchronously; then its DEL
		// removes its record, whose route (all of routedNet) would
		// otherwise clash with TestDeletion's narrower one.
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			out, err := c.Kubectl(ctx, "", "get", "pods", "-n", allowedNS, "-l", "app=router", "-o", "name")
			if err == nil && out == "" && (router == nil || !hasRecord(t, router.sandbox)) {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Errorf("the pods of deployment %s/router were not deleted, or their record stayed", allowedNS)
	})
	kubectl(t, "", "rollout", "status", "-n", allowedNS, "deployment/router", "--timeout=90s")
	name := kubectl(t, "", "get", "pods", "-n", allowedNS, "-l", "app=router", "-o", "jsonpath={.items[0].metadata.name}")
	router = podByName(t, allowedNS, name)

	// The client network: a netns behind the router pod, fam.client with
	// the router's fam.clientGW as its gateway.
	client, release, err := cluster.NetworkBehind(router.netns, []netip.Prefix{fam.clientGW}, []netip.Prefix{fam.client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	packets.EchoServer(t, c.OutsideNetNS, netip.AddrPortFrom(fam.outsideIP, 7002))
	src, err := packets.Exchange(client, netip.AddrPortFrom(fam.outsideIP, 7002), 10*time.Second)
	if err != nil {
		t.Fatalf("the client behind %s/%s did not reach the server outside the node and back: %v", allowedNS, name, err)
	}
	if src != fam.client.Addr().String() {
		t.Fatalf("the server outside saw source %s, want the client's own %s", src, fam.client.Addr())
	}
	t.Logf("client %s behind %s (%s) reached %s and back", fam.client.Addr(), name, router.ip, fam.outsideIP)
	// The runtime capability is off (podwireConfig): the forwarding
	// annotation reached podwire through the node agent's socket.
	if src := annotationSource(t, router.sandbox); src != "agent" {
		t.Fatalf("podwire's record of %s says the annotations came from %q, want \"agent\"", name, src)
	}
}

func addrUp(link, cidr string) error {
	l, err := netlinksafe.LinkByName(link)
	if err != nil {
		return err
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	if a.IP.To4() == nil {
		a.Flags = unix.IFA_F_NODAD // unique by construction; DAD would hold it for a second
	}
	if err := netlink.AddrAdd(l, a); err != nil {
		return err
	}
	return netlink.LinkSetUp(l)
}

// TestRefusal: the namespace gate refuses a forwarding pod in default; the
// refusal reaches `kubectl describe pod` as a FailedCreatePodSandBox event
// naming the annotation and the gate, and podwire keeps no record of it.
func TestRefusal(t *testing.T) {
	needCluster(t)
	before := len(records(t))
	applyPod(t, "default", "router-refused", map[string]string{annForwarding: "true"})
	deadline := time.Now().Add(90 * time.Second)
	var describe string
	for {
		describe = kubectl(t, "", "describe", "pod", "-n", "default", "router-refused")
		if strings.Contains(describe, "FailedCreatePodSandBox") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no FailedCreatePodSandBox event for default/router-refused:\n%s", describe)
		}
		time.Sleep(time.Second)
	}
	var event string
	for _, l := range strings.Split(describe, "\n") {
		if strings.Contains(l, "FailedCreatePodSandBox") {
			event = strings.TrimSpace(l)
			break
		}
	}
	t.Logf("kubectl describe pod: %s", event)
	for _, want := range []string{annForwarding, "forwarding.namespaces", `"default"`} {
		if !strings.Contains(event, want) {
			t.Errorf("the FailedCreatePodSandBox event does not name %s: %s", want, event)
		}
	}
	if phase := kubectl(t, "", "get", "pod", "-n", "default", "router-refused", "-o", "jsonpath={.status.phase}"); phase != "Pending" {
		t.Errorf("refused pod is %s, want Pending", phase)
	}
	if after := len(records(t)); after != before {
		t.Errorf("podwire records: %d before the refused pod, %d after", before, after)
	}
}

// TestEgressFromNodeAnnotation: the node's egress IP comes from the Node
// annotation set with `kubectl annotate node`; a server outside the node
// sees it as the pod's source, while traffic to exceptCIDRs keeps the pod's
// own address.
func TestEgressFromNodeAnnotation(t *testing.T) {
	needCluster(t)
	if err := ns.WithNetNSPath(c.OutsideNetNS, func(ns.NetNS) error {
		return addrUp("lo", netip.PrefixFrom(fam.serverIP, fam.serverIP.BitLen()).String())
	}); err != nil {
		t.Fatalf("failed to add the server address outside: %v", err)
	}
	serverIP, egressIP, outsideIP := fam.serverIP, fam.egressIP, fam.outsideIP
	packets.EchoServer(t, c.OutsideNetNS, netip.AddrPortFrom(serverIP, 7003))
	packets.EchoServer(t, c.OutsideNetNS, netip.AddrPortFrom(outsideIP, 7004))
	setNodeEgressIP(t, egressIP)

	p := runPod(t, "default", "egress", nil)
	src, err := packets.Exchange(p.netns, netip.AddrPortFrom(serverIP, 7003), 10*time.Second)
	if err != nil {
		t.Fatalf("pod %s did not reach the server %s outside: %v", p.ip, serverIP, err)
	}
	if src != egressIP.String() {
		t.Fatalf("the server outside saw source %s, want the node's egress IP %s", src, egressIP)
	}
	src, err = packets.Exchange(p.netns, netip.AddrPortFrom(outsideIP, 7004), 10*time.Second)
	if err != nil {
		t.Fatalf("pod %s did not reach %s: %v", p.ip, outsideIP, err)
	}
	if src != p.ip.String() {
		t.Fatalf("traffic to %s (in exceptCIDRs) left with source %s, want the pod's %s", outsideIP, src, p.ip)
	}
	t.Logf("to %s: source %s (egress IP); to %s (exceptCIDRs): source %s", serverIP, egressIP, outsideIP, src)
}

// setNodeEgressIP gives the node ip on its uplink and announces it with
// `kubectl annotate node NODE podwire.io/egress-ip=IP`, then waits until
// the node agent has written it into stateDir, where the plugin reads it;
// both are undone when the test ends.
func setNodeEgressIP(t *testing.T, ip netip.Addr) {
	t.Helper()
	if err := ns.WithNetNSPath(n1.NetNS, func(ns.NetNS) error {
		return addrUp("eth0", netip.PrefixFrom(ip, fam.linkPrefix.Bits()).String())
	}); err != nil {
		t.Fatalf("failed to add the egress IP %s to the node: %v", ip, err)
	}
	egress := filepath.Join(stateDir, egressFile)
	t.Cleanup(func() {
		kubectl(t, "", "annotate", "node", n1.Name, annEgressIP+"-")
		waitFile(context.Background(), egress, func(b []byte) bool { return !strings.Contains(string(b), ip.String()) })
		ns.WithNetNSPath(n1.NetNS, func(ns.NetNS) error {
			l, err := netlinksafe.LinkByName("eth0")
			if err != nil {
				return err
			}
			a, _ := netlink.ParseAddr(netip.PrefixFrom(ip, fam.linkPrefix.Bits()).String())
			return netlink.AddrDel(l, a)
		})
	})
	kubectl(t, "", "annotate", "node", n1.Name, "--overwrite", annEgressIP+"="+ip.String())
	if err := waitFile(context.Background(), egress, func(b []byte) bool { return strings.Contains(string(b), ip.String()) }); err != nil {
		t.Fatalf("the node agent did not write the annotation: %v\n%s", err, agentLog(context.Background()))
	}
}

// TestDeletion: deleting a pod through the API leaves no record, set
// element or route of it on the node, once its sandbox is removed (both of
// containerd's DELs, at StopPodSandbox and RemovePodSandbox, have run).
func TestDeletion(t *testing.T) {
	needCluster(t)
	const ns = "nf-del"
	routes := fam.routedHalf
	createNamespace(t, ns)
	p := runPod(t, ns, "router-del", map[string]string{annForwarding: "true", annRoutes: routes.String()})
	ipRE := podIPRE(p)
	if !hasRecord(t, p.sandbox) || !ipRE.MatchString(nodeRuleset(t)) || !hasRoute(t, routes) {
		t.Fatalf("before deletion: record %v, element of %s %v, route to %s %v: want all",
			hasRecord(t, p.sandbox), p.ip, ipRE.MatchString(nodeRuleset(t)), routes, hasRoute(t, routes))
	}
	start := time.Now()
	deletePod(t, ns, "router-del")
	t.Logf("pod deleted through the API in %v", time.Since(start).Round(time.Millisecond))
	waitSandboxRemoved(t, p)
	t.Logf("sandbox removed %v after the delete", time.Since(start).Round(time.Millisecond))
	checkPodLeftNothing(t, p)
	if hasRoute(t, routes) {
		t.Errorf("the route to %s is left on the node", routes)
	}
}

// hasRoute reports whether the node routes prefix.
func hasRoute(t *testing.T, prefix netip.Prefix) bool {
	t.Helper()
	var found bool
	if err := ns.WithNetNSPath(n1.NetNS, func(ns.NetNS) error {
		routes, err := netlinksafe.RouteList(nil, netlink.FAMILY_ALL)
		for _, r := range routes {
			if r.Dst != nil && r.Dst.String() == prefix.String() {
				found = true
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return found
}

// TestRewrittenConflist: the primary's installer rewrites its conflist
// without podwire (as flannel's install step does on every restart); the
// node agent puts podwire's entry back within 10 s, and a pod created right
// after is source-checked: its forged sources are dropped.
func TestRewrittenConflist(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := os.WriteFile(n1.PrimaryConflist, n1.PrimaryConflistBytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := waitFile(ctx, n1.PrimaryConflist, func(b []byte) bool { return strings.Contains(string(b), `"podwire"`) }); err != nil {
		t.Fatalf("the agent did not restore podwire's entry: %v\n%s", err, agentLog(context.Background()))
	}
	restored := time.Since(start)
	if restored > 10*time.Second {
		t.Fatalf("podwire's entry restored after %v, want within 10 s", restored)
	}
	if err := waitCNIConfig(ctx, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("the agent restored podwire's entry %v after the rewrite; containerd reloaded it after %v",
		restored.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	p := runPod(t, "default", "after-rewrite", nil)
	genuine, passed := spoofFrom(t, p, 7010)
	if !genuine || len(passed) > 0 {
		t.Fatalf("a pod created after the restore: genuine %v, forged passed %v; want it source-checked", genuine, passed)
	}
}

// TestNodeStaysReady: the node was Ready at every sample of the run (one a
// second since the cluster was up), with the VLAN uplink the config names
// missing throughout.
func TestNodeStaysReady(t *testing.T) {
	needCluster(t)
	var missing bool
	if err := ns.WithNetNSPath(n1.NetNS, func(ns.NetNS) error {
		_, err := netlinksafe.LinkByName(missingUplink)
		_, missing = err.(netlink.LinkNotFoundError)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !missing {
		t.Fatalf("the uplink %s exists on the node; this test needs it missing", missingUplink)
	}
	if !strings.Contains(string(podwireEntry), `"uplink":"`+missingUplink+`"`) {
		t.Fatalf("podwire's entry does not name the uplink %s: %s", missingUplink, podwireEntry)
	}
	samples, notReady := readiness.report()
	if samples < 10 {
		t.Fatalf("only %d readiness samples", samples)
	}
	if len(notReady) > 0 {
		t.Fatalf("the node was not Ready at %d of %d samples: %v", len(notReady), samples, notReady)
	}
	t.Logf("node Ready at all %d samples, uplink %s missing", samples, missingUplink)
}
