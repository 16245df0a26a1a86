// Package cri is podwire's end-to-end test through a real container
// runtime: a private containerd with runc (PODWIRE_CONTAINERD_DIR and
// PODWIRE_RUNC, scripts/containerd-build.sh's 2.x; unset, the host's 1.6,
// the legacy leg: make test-e2e runs both) in its own network namespace,
// driven over the CRI by a Go client, runs pod sandboxes whose network is
// the ptp + host-local conflist of cni-conf/ with podwire chained by
// `podwire install`'s code. Every address is test-only (10.199.0.0/24,
// fd00:199::/64) and everything lives in the node namespace, the temp dir
// and the pods' namespaces, all removed at the end; the host's links,
// sysctls and ruleset are never touched.
//
// Needs root, containerd, runc, nsenter/unshare (util-linux), the reference
// plugins in PODWIRE_CNI_BIN and podwire in PODWIRE_BIN (make test-e2e).
package cri

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/podwire/podwire/integration/packets"
	"github.com/podwire/podwire/pkg/install"
	"github.com/vishvananda/netlink"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var (
	podNet4 = netip.MustParsePrefix("10.199.0.0/24")
	podNet6 = netip.MustParsePrefix("fd00:199::/64")
	// ptp puts the gateways on the node side of each pod's veth.
	gateway4 = netip.MustParseAddr("10.199.0.1")
	gateway6 = netip.MustParseAddr("fd00:199::1")
)

// env holds what the test needs from the Makefile, or skips.
func env(t *testing.T) (cniBin, podwireBin string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs containerd and creates network namespaces")
	}
	cniBin = os.Getenv("PODWIRE_CNI_BIN")
	if cniBin == "" {
		t.Skip("PODWIRE_CNI_BIN not set: run through make test-e2e")
	}
	for _, p := range []string{"ptp", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBin, p)); err != nil {
			t.Fatalf("reference plugin %s missing in PODWIRE_CNI_BIN=%s: %v", p, cniBin, err)
		}
	}
	podwireBin = os.Getenv("PODWIRE_BIN")
	if podwireBin != "" {
		if _, err := os.Stat(podwireBin); err != nil {
			t.Fatalf("PODWIRE_BIN=%s: %v", podwireBin, err)
		}
	}
	return cniBin, podwireBin
}

// demoConflist returns cni-conf/20-ptp.conflist with its host paths moved
// into dir; without podwireBin the podwire entry is removed and the harness
// runs ptp + host-local alone.
func demoConflist(t *testing.T, dir string, withPodwire bool) (list []byte, entry []byte) {
	t.Helper()
	data, err := os.ReadFile("../../cni-conf/20-ptp.conflist")
	if err != nil {
		t.Fatal(err)
	}
	var l map[string]any
	if err := json.Unmarshal(data, &l); err != nil {
		t.Fatal(err)
	}
	plugins := l["plugins"].([]any)
	ptp := plugins[0].(map[string]any)
	ptp["ipam"].(map[string]any)["dataDir"] = filepath.Join(dir, "ipam")
	pw := plugins[len(plugins)-1].(map[string]any)
	pw["logFile"] = filepath.Join(dir, "podwire.log")
	pw["stateDir"] = filepath.Join(dir, "podwire-state")
	if entry, err = json.Marshal(pw); err != nil {
		t.Fatal(err)
	}
	l["plugins"] = plugins[:1]
	if list, err = json.MarshalIndent(l, "", "  "); err != nil {
		t.Fatal(err)
	}
	if !withPodwire {
		entry = nil
	}
	return list, entry
}

// Pod namespaces of the test: forwarding.namespaces of the demo conflist
// is ["nf-*"].
const (
	plainNS   = "default"
	allowedNS = "nf-e2e"
)

func TestPodLifecycle(t *testing.T) {
	cniBin, podwireBin := env(t)
	withPodwire := podwireBin != ""
	n := startNode(t)
	// The node namespace is the test's: rp_filter off there, so that only
	// podwire's source check decides which forged packets pass.
	n.sysctl(t, "net/ipv4/conf/all/rp_filter", "0")
	n.sysctl(t, "net/ipv4/conf/default/rp_filter", "0")

	list, entry := demoConflist(t, n.dir, withPodwire)
	conflist := n.installCNI(t, cniBin, "20-podwire-demo.conflist", list)
	if withPodwire {
		// The operator path: podwire install copies the binary and chains
		// the entry; a second run must change nothing.
		res, err := install.Install(install.Options{BinDir: n.binDir, Binary: podwireBin, Conflist: conflist, Config: entry})
		if err != nil {
			t.Fatalf("podwire install: %v", err)
		}
		if !res.BinaryChanged || !res.ConflistChanged {
			t.Fatalf("first podwire install changed nothing: %+v", res)
		}
		if res, err = install.Install(install.Options{BinDir: n.binDir, Binary: podwireBin, Conflist: conflist, Config: entry}); err != nil || res.BinaryChanged || res.ConflistChanged {
			t.Fatalf("second podwire install: %+v %v", res, err)
		}
	} else {
		t.Log("PODWIRE_BIN not set: running ptp + host-local without podwire")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	waitNetworkReady(ctx, t, n)

	plain, err := n.runPod(ctx, t, plainNS, "plain", nil)
	if err != nil {
		t.Fatalf("RunPodSandbox %s/plain: %v", plainNS, err)
	}
	checkPodIPs(t, plain)
	pods := []*pod{plain}
	var router *pod
	if withPodwire {
		router, err = n.runPod(ctx, t, allowedNS, "router", map[string]string{annForwarding: "true"})
		if err != nil {
			t.Fatalf("RunPodSandbox %s/router: %v", allowedNS, err)
		}
		checkPodIPs(t, router)
		pods = append(pods, router)
	}

	// Real packets both ways between the node namespace and each pod.
	for _, p := range pods {
		checkConnectivity(t, n, p)
	}

	if withPodwire {
		wired := map[string]bool{plainNS + "/plain": false, allowedNS + "/router": true}
		checkRecords(t, n, wired)
		checkStatusCLI(t, n, conflist, wired)
		checkPodForwarding(t, router, true)
		checkPodForwarding(t, plain, false)

		// Forged sources: the ordinary pod's are dropped, the forwarding
		// pod's pass. Each pod also sends from its own address as control.
		sink, err := packets.NewSink(n.netns.Path(), 7009)
		if err != nil {
			t.Fatal(err)
		}
		forged := map[*pod][]netip.Addr{
			plain:  {netip.MustParseAddr("10.199.0.250"), netip.MustParseAddr("fd00:199::250"), netip.MustParseAddr("198.51.100.9")},
			router: {netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8:100::7"), netip.MustParseAddr("10.199.0.251")},
		}
		for p, srcs := range forged {
			for _, v6 := range []bool{false, true} {
				own, _ := p.addr(v6)
				srcs = append(srcs, own)
			}
			for _, src := range srcs {
				gw := gateway4
				if src.Is6() {
					gw = gateway6
				}
				if err := packets.SendFrom(p.netnsPath, src, netip.AddrPortFrom(gw, 7009), p.name, 5); err != nil {
					t.Fatalf("%s: %v", p.name, err)
				}
			}
			forged[p] = srcs
		}
		time.Sleep(300 * time.Millisecond)
		for p, srcs := range forged {
			for _, src := range srcs {
				_, own := ownAddr(p, src)
				want := own || p == router
				if got := sink.Got(src, p.name); got != want {
					t.Errorf("pod %s/%s sending from %s: node received=%v, want %v", p.namespace, p.name, src, got, want)
				} else {
					t.Logf("pod %s/%s sending from %s: received=%v as expected", p.namespace, p.name, src, got)
				}
			}
		}
		sink.Close()

		// A forwarding pod outside forwarding.namespaces: the sandbox fails
		// with podwire's message in the CRI error, and nothing is left.
		_, err = n.runPod(ctx, t, plainNS, "sneaky", map[string]string{annForwarding: "true"})
		if err == nil {
			t.Errorf("RunPodSandbox %s/sneaky with %s succeeded, want refusal", plainNS, annForwarding)
		} else if msg := err.Error(); !strings.Contains(msg, annForwarding) || !strings.Contains(msg, "forwarding.namespaces") {
			t.Errorf("RunPodSandbox %s/sneaky: error does not carry podwire's message: %v", plainNS, err)
		} else {
			t.Logf("RunPodSandbox %s/sneaky refused: %v", plainNS, err)
		}
		checkRecords(t, n, wired)
	}

	for _, p := range pods {
		n.removePod(ctx, t, p)
	}
	checkNothingLeft(ctx, t, n)
	if withPodwire {
		checkPodwireLeftovers(t, n)
		checkUninstall(ctx, t, n, conflist)
	}
}

// ownAddr reports whether a is one of p's addresses.
func ownAddr(p *pod, a netip.Addr) (netip.Addr, bool) {
	for _, o := range p.ips {
		if o == a {
			return o, true
		}
	}
	return netip.Addr{}, false
}

// checkConnectivity exchanges UDP both ways between the node namespace and
// the pod over each family.
func checkConnectivity(t *testing.T, n *node, p *pod) {
	t.Helper()
	echo, err := packets.Listen(p.netnsPath, 7007)
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go packets.Echo(echo)
	nodeEcho, err := packets.Listen(n.netns.Path(), 7008)
	if err != nil {
		t.Fatal(err)
	}
	defer nodeEcho.Close()
	go packets.Echo(nodeEcho)
	for _, gw := range []netip.Addr{gateway4, gateway6} {
		a, _ := p.addr(gw.Is6())
		if src, err := packets.Exchange(n.netns.Path(), netip.AddrPortFrom(a, 7007), 10*time.Second); err != nil {
			t.Errorf("node to pod %s/%s %s: %v", p.namespace, p.name, a, err)
		} else if src != gw.String() {
			t.Errorf("node to pod %s/%s %s: pod saw source %s, want %s", p.namespace, p.name, a, src, gw)
		}
		if src, err := packets.Exchange(p.netnsPath, netip.AddrPortFrom(gw, 7008), 10*time.Second); err != nil {
			t.Errorf("pod %s/%s to node %s: %v", p.namespace, p.name, gw, err)
		} else if src != a.String() {
			t.Errorf("pod %s/%s to node %s: node saw source %s, want the pod's %s", p.namespace, p.name, gw, src, a)
		}
	}
}

// waitNetworkReady waits until the CRI reports its network ready (it has
// loaded the conflist).
func waitNetworkReady(ctx context.Context, t *testing.T, n *node) {
	t.Helper()
	for {
		st, err := n.runtime.Status(ctx, &runtimeapi.StatusRequest{})
		if err == nil {
			for _, c := range st.Status.Conditions {
				if c.Type == runtimeapi.NetworkReady && c.Status {
					return
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("CRI network never became ready: %v %v", err, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkPodIPs checks the CRI reports one address of each family from the
// test ranges.
func checkPodIPs(t *testing.T, p *pod) {
	t.Helper()
	a4, ok4 := p.addr(false)
	a6, ok6 := p.addr(true)
	if !ok4 || !ok6 || !podNet4.Contains(a4) || !podNet6.Contains(a6) {
		t.Fatalf("pod %s/%s IPs %v, want one in %s and one in %s", p.namespace, p.name, p.ips, podNet4, podNet6)
	}
}

// checkNothingLeft checks that no sandbox, host-side link, pod route or
// address allocation survives the pods.
func checkNothingLeft(ctx context.Context, t *testing.T, n *node) {
	t.Helper()
	l, err := n.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 0 {
		t.Errorf("%d sandboxes left", len(l.Items))
	}
	err = n.netns.Do(func(ns.NetNS) error {
		links, err := netlinksafe.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if l.Attrs().Name != "lo" {
				t.Errorf("link %q (%s) left in the node netns", l.Attrs().Name, l.Type())
			}
		}
		routes, err := netlinksafe.RouteList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if r.Dst == nil {
				continue
			}
			d, _ := netip.ParsePrefix(r.Dst.String())
			if podNet4.Overlaps(d) || podNet6.Overlaps(d) {
				t.Errorf("route %s left in the node netns", r.Dst)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(n.dir, "ipam", "podwire-demo"))
	for _, e := range ents {
		if name := e.Name(); name != "lock" && !strings.HasPrefix(name, "last_reserved_ip") {
			t.Errorf("host-local allocation %q left", name)
		}
	}
}
