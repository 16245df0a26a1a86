package calico

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
	"github.com/podwire/podwire/pkg/cliapi"
)

// Pods of the tests run the pause image as their container: every packet
// of a scenario is sent and received by the test itself inside the pod's
// network namespace, found through the node's CRI from the pod's UID.

// pod is a running pod as the test sees it.
type pod struct {
	namespace, name string
	uid             string
	ip4, ip6        netip.Addr
	netns           string // /proc/PID/ns/net of its sandbox
}

// ips are p's addresses, one per family of the cluster.
func (p *pod) ips() []netip.Addr {
	if p.ip6.IsValid() {
		return []netip.Addr{p.ip4, p.ip6}
	}
	return []netip.Addr{p.ip4}
}

// ip is p's address of a's family.
func (p *pod) ip(a netip.Addr) netip.Addr {
	if a.Is4() {
		return p.ip4
	}
	return p.ip6
}

func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	return c.MustKubectl(t, stdin, args...)
}

// runPod creates a pod with annotations, waits until it is Ready with an
// address of each family, and deletes it when the test ends.
func runPod(t *testing.T, namespace, name string, annotations map[string]string) *pod {
	t.Helper()
	start := time.Now()
	manifest, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": namespace, "annotations": annotations},
		"spec": map[string]any{"automountServiceAccountToken": false, "terminationGracePeriodSeconds": 1,
			"containers": []map[string]any{{"name": "main", "image": cluster.PauseImage, "imagePullPolicy": "Never"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kubectl(t, "", "delete", "pod", "-n", namespace, name, "--ignore-not-found", "--wait=true", "--timeout=90s")
	})
	kubectl(t, string(manifest), "apply", "-f", "-")
	kubectl(t, "", "wait", "-n", namespace, "--for=condition=Ready", "pod/"+name, "--timeout=90s")
	out := kubectl(t, "", "get", "pod", "-n", namespace, name, "-o", `jsonpath={.metadata.uid} {.status.podIPs[*].ip}`)
	f := strings.Fields(out)
	p := &pod{namespace: namespace, name: name}
	if len(f) > 0 {
		p.uid = f[0]
	}
	for _, s := range f[1:] {
		a, err := netip.ParseAddr(s)
		if err != nil {
			t.Fatalf("pod %s/%s: IP %q: %v", namespace, name, s, err)
		}
		if a.Is4() {
			p.ip4 = a
		} else {
			p.ip6 = a
		}
	}
	if !p.ip4.IsValid() || p.ip6.IsValid() != c.DualStack() {
		t.Fatalf("pod %s/%s has addresses %q, want one of each of the cluster's families", namespace, name, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p.netns, _, err = n1.PodNetNS(ctx, p.uid); err != nil {
		t.Fatalf("pod %s/%s: %v", namespace, name, err)
	}
	t.Logf("pod %s/%s Ready in %v: %v", namespace, name, time.Since(start).Round(time.Millisecond), p.ips())
	return p
}

// createNamespace creates a namespace and deletes it when the test ends.
func createNamespace(t *testing.T, name string) {
	t.Helper()
	kubectl(t, "", "create", "namespace", name)
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", name, "--wait=true", "--timeout=90s") })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitServiceAccount(ctx, name); err != nil {
		t.Fatal(err)
	}
}

// uplinkAddrs adds prefixes to eth0 in the netns at nsPath: the uplink of
// the node or of the outside network.
func uplinkAddrs(nsPath string, prefixes ...netip.Prefix) error {
	return ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, p := range prefixes {
			a, err := netlink.ParseAddr(p.String())
			if err != nil {
				return err
			}
			if p.Addr().Is6() {
				a.Flags = unix.IFA_F_NODAD // usable at once
			}
			if err := netlink.AddrReplace(l, a); err != nil {
				return fmt.Errorf("%s on eth0: %w", p, err)
			}
		}
		return nil
	})
}

// delUplinkAddrs removes prefixes from eth0 in the netns at nsPath.
func delUplinkAddrs(nsPath string, prefixes ...netip.Prefix) error {
	return ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, p := range prefixes {
			a, _ := netlink.ParseAddr(p.String())
			if err := netlink.AddrDel(l, a); err != nil {
				return fmt.Errorf("%s on eth0: %w", p, err)
			}
		}
		return nil
	})
}

// nodeNft runs nft with args on the node and returns its output.
func nodeNft(t *testing.T, args ...string) string {
	t.Helper()
	out, err := n1.Command(context.Background(), "nft", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("nft %s on the node: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// nodeStatus is `podwire status --json` of the node's installed plugin,
// once the agent is ready and the tables current (cnitest.SettledStatus).
func nodeStatus(t *testing.T) *cliapi.NodeStatus {
	t.Helper()
	r, err := cnitest.SettledStatus(30*time.Second, func() *exec.Cmd {
		return n1.Command(context.Background(), "/opt/cni/bin/podwire", "status", "--conf-dir", "/etc/cni/net.d", "--json")
	})
	if err != nil {
		t.Fatalf("podwire status: %v\n%s", err, r.Output)
	}
	return r.Status
}

// attachment is p's attachment in st (its primary interface's).
func attachment(t *testing.T, st *cliapi.NodeStatus, p *pod) cliapi.Attachment {
	t.Helper()
	for _, a := range st.Attachments {
		if a.Pod == p.namespace+"/"+p.name {
			return a
		}
	}
	t.Fatalf("podwire status shows no attachment of %s/%s", p.namespace, p.name)
	return cliapi.Attachment{}
}

// drops is what podwire's source check dropped from p's host veth.
func drops(t *testing.T, p *pod) uint64 {
	t.Helper()
	a := attachment(t, nodeStatus(t), p)
	if a.Drops == nil {
		return 0
	}
	return a.Drops.Packets
}

// sendForged sends five datagrams from p's netns with source src to dst
// and reports whether any arrived within wait, from whatever source: a
// pod's own address, or a forged one in Calico's IP pool, arrives
// masqueraded by Calico's natOutgoing.
func sendForged(t *testing.T, sink *packets.Sink, p *pod, src netip.Addr, dst netip.AddrPort, payload string, wait time.Duration) bool {
	t.Helper()
	if err := packets.SendFrom(p.netns, src, dst, payload, 5); err != nil {
		t.Fatal(err)
	}
	return arrived(sink, payload, wait)
}

// arrived waits up to wait for a datagram with payload at sink, from any
// source.
func arrived(sink *packets.Sink, payload string, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for len(sink.From(payload)) == 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// calicoTables is Felix's ruleset: its table of each family, with handles
// and without counters' values (nft -s), so that two listings are equal
// only when no rule, chain or set of it was replaced.
func calicoTables(t *testing.T) string {
	t.Helper()
	return nodeNft(t, "-a", "-s", "list", "table", "ip", "calico") + nodeNft(t, "-a", "-s", "list", "table", "ip6", "calico")
}

// podwireTables is podwire's node tables, listed as calicoTables lists
// Felix's.
func podwireTables(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, tbl := range [][2]string{{"inet", "podwire"}, {"inet", "podwire-egress"}, {"ip6", "podwire-probe-snat"}} {
		b.WriteString(nodeNft(t, "-a", "-s", "list", "table", tbl[0], tbl[1]))
	}
	return b.String()
}

// cmdOut runs argv and returns its combined output (for diagnostics).
func cmdOut(cmd *exec.Cmd) string {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return string(out)
}

// server is the test server beyond the cluster of one family: its address
// and the outside network's own (the source the outside sends from).
type server struct{ addr, outside netip.Addr }

// serverOf is the server of a's family.
func serverOf(a netip.Addr) server {
	if a.Is4() {
		return server{serverIP, cluster.OutsideIP}
	}
	return server{serverIP6, cluster.OutsideIP6}
}

func (s server) addrPort(port int) netip.AddrPort { return netip.AddrPortFrom(s.addr, uint16(port)) }
func (s server) String() string                   { return s.addr.String() }

// nowhereOf is the source from nowhere of a's family.
func nowhereOf(a netip.Addr) netip.Addr {
	if a.Is4() {
		return nowhere
	}
	return nowhere6
}

// newSink listens on UDP port on the outside network (the servers'
// addresses) until the test ends.
func newSink(t *testing.T, port int) *packets.Sink {
	t.Helper()
	s, err := packets.NewSink(c.OutsideNetNS, port)
	if err != nil {
		t.Fatalf("failed to listen on UDP %d: %v", port, err)
	}
	t.Cleanup(s.Close)
	return s
}

// hostIn is the client behind a router in prefix p (its second address;
// the router's gateway is the first).
func hostIn(p netip.Prefix) netip.Addr { return p.Addr().Next().Next() }

// clientsBehind makes a client network behind router (cluster.NetworkBehind)
// with one prefix per family, the router's gateways the first address of
// each and the client hostIn, until the test ends; it returns the
// client's netns.
func clientsBehind(t *testing.T, router *pod, prefixes ...netip.Prefix) string {
	t.Helper()
	var gws, hosts []netip.Prefix
	for _, p := range prefixes {
		gws = append(gws, netip.PrefixFrom(p.Addr().Next(), p.Bits()))
		hosts = append(hosts, netip.PrefixFrom(hostIn(p), p.Bits()))
	}
	path, release, err := cluster.NetworkBehind(router.netns, gws, hosts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return path
}

// lineDiff lists the lines only in a ("-") and only in b ("+").
func lineDiff(a, b string) string {
	count := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(b, "\n") {
		count[l]--
	}
	var out []string
	for l, n := range count {
		switch {
		case n > 0:
			out = append(out, "- "+l)
		case n < 0:
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
