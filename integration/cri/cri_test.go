// Package cri is podwire's end-to-end test through a real container
// runtime: a private containerd 1.6 (Debian's, with runc) in its own network
// namespace, driven over the CRI by a Go client, runs pod sandboxes whose
// network is the ptp + host-local conflist of cni-conf/ with podwire chained
// by `podwire install`'s code. Every address is test-only (10.199.0.0/24,
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

	"github.com/containernetworking/plugins/pkg/ns"
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

func TestPodLifecycle(t *testing.T) {
	cniBin, podwireBin := env(t)
	n := startNode(t)
	list, entry := demoConflist(t, n.dir, podwireBin != "")
	conflist := n.installCNI(t, cniBin, "20-podwire-demo.conflist", list)
	if entry != nil {
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

	plain, err := n.runPod(ctx, t, "default", "plain", nil)
	if err != nil {
		t.Fatalf("RunPodSandbox default/plain: %v", err)
	}
	checkPodIPs(t, plain)

	// Real packets both ways between the node namespace and the pod.
	echo, err := udpListen(plain.netnsPath, 7007)
	if err != nil {
		t.Fatal(err)
	}
	go udpEcho(echo)
	for _, v6 := range []bool{false, true} {
		a, _ := plain.addr(v6)
		src, err := udpExchange(n.netns.Path(), netip.AddrPortFrom(a, 7007), 10*time.Second)
		if err != nil {
			t.Errorf("node to pod %s: %v", a, err)
		} else {
			t.Logf("node -> pod %s: echoed, seen from %s", a, src)
		}
	}
	echo.Close()

	nodeEcho, err := udpListen(n.netns.Path(), 7008)
	if err != nil {
		t.Fatal(err)
	}
	go udpEcho(nodeEcho)
	for _, gw := range []netip.Addr{gateway4, gateway6} {
		a, _ := plain.addr(gw.Is6())
		if src, err := udpExchange(plain.netnsPath, netip.AddrPortFrom(gw, 7008), 10*time.Second); err != nil {
			t.Errorf("pod to node %s: %v", gw, err)
		} else if src != a.String() {
			t.Errorf("pod to node %s: node saw source %s, want the pod's %s", gw, src, a)
		}
	}
	nodeEcho.Close()

	n.removePod(ctx, t, plain)
	checkNothingLeft(ctx, t, n)
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
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if l.Attrs().Name != "lo" {
				t.Errorf("link %q (%s) left in the node netns", l.Attrs().Name, l.Type())
			}
		}
		routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
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
