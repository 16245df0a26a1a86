package cri

import (
	"context"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/packets"
	"github.com/podwire/podwire/pkg/install"
)

// flannelDelegateConflist is what flannel's CNI plugin runs on a node,
// written as stock installers write it (cniVersion 0.3.1): the reference
// bridge plugin on cni0 (hairpinMode, isDefaultGateway) with host-local,
// then portmap; podwire is chained by `podwire install`'s code.
func flannelDelegateConflist(t *testing.T, dir string) []byte {
	t.Helper()
	l := map[string]any{
		"cniVersion": "0.3.1",
		"name":       "cbr0",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "hairpinMode": true,
				"ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(dir, "ipam"),
					"ranges": []any{
						[]any{map[string]string{"subnet": podNet4.String(), "gateway": gateway4.String()}},
						[]any{map[string]string{"subnet": podNet6.String(), "gateway": gateway6.String()}},
					}},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBridgedPrimarySourceCheck runs pods through containerd on a flannel
// node's chain (bridge on cni0 + portmap at 0.3.1, then podwire): an
// ordinary pod reaches the node and a neighbour pod on the bridge from its
// own addresses, and neither from a forged source nor from the forwarding
// pod's address; the forwarding pod's forged sources reach both.
func TestBridgedPrimarySourceCheck(t *testing.T) {
	cniBin, podwireBin := env(t)
	if podwireBin == "" {
		t.Skip("PODWIRE_BIN not set: the test is about podwire's check")
	}
	n := startNode(t)
	n.sysctl(t, "net/ipv4/conf/all/rp_filter", "0")
	n.sysctl(t, "net/ipv4/conf/default/rp_filter", "0")
	conflist := n.installCNI(t, cniBin, "10-flannel.conflist", flannelDelegateConflist(t, n.dir))
	entry, err := json.Marshal(map[string]any{
		"type": "podwire", "logFile": filepath.Join(n.dir, "podwire.log"), "stateDir": n.stateDir(),
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true},
		"forwarding":   map[string]any{"namespaces": []string{"nf-*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := install.Install(install.Options{BinDir: n.binDir, Binary: podwireBin, Conflist: conflist, Config: entry}); err != nil {
		t.Fatalf("podwire install: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	waitNetworkReady(ctx, t, n)

	a, err := n.runPod(ctx, t, plainNS, "a", nil)
	if err != nil {
		t.Fatalf("RunPodSandbox a: %v", err)
	}
	b, err := n.runPod(ctx, t, plainNS, "b", nil)
	if err != nil {
		t.Fatalf("RunPodSandbox b: %v", err)
	}
	router, err := n.runPod(ctx, t, allowedNS, "router", map[string]string{annForwarding: "true"})
	if err != nil {
		t.Fatalf("RunPodSandbox router: %v", err)
	}
	for _, p := range []*pod{a, b, router} {
		checkPodIPs(t, p)
	}

	const port = 7010
	nodeSink, err := packets.NewSink(n.netns.Path(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer nodeSink.Close()
	podSink, err := packets.NewSink(b.netnsPath, port)
	if err != nil {
		t.Fatal(err)
	}
	defer podSink.Close()

	type send struct {
		from *pod
		src  netip.Addr
		pass bool
	}
	a4, _ := a.addr(false)
	a6, _ := a.addr(true)
	r4, _ := router.addr(false)
	r6, _ := router.addr(true)
	forged4, forged6 := netip.MustParseAddr("10.199.0.250"), netip.MustParseAddr("fd00:199::250")
	sends := []send{
		{a, a4, true}, {a, a6, true}, {a, forged4, false}, {a, forged6, false}, {a, r4, false}, {a, r6, false},
		{router, forged4, true}, {router, forged6, true},
	}
	b4, _ := b.addr(false)
	b6, _ := b.addr(true)
	for _, d := range []struct {
		name   string
		sink   *packets.Sink
		v4, v6 netip.Addr
	}{{"the node", nodeSink, gateway4, gateway6}, {"pod b", podSink, b4, b6}} {
		for _, s := range sends {
			to := netip.AddrPortFrom(d.v4, port)
			if s.src.Is6() {
				to = netip.AddrPortFrom(d.v6, port)
			}
			if err := packets.SendFrom(s.from.netnsPath, s.src, to, s.from.name+" to "+d.name, 3); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range sends {
			payload := s.from.name + " to " + d.name
			if s.pass && !d.sink.WaitGot(s.src, payload, 5*time.Second) {
				t.Errorf("%s did not receive pod %s's datagram from %s (it must pass)", d.name, s.from.name, s.src)
			}
		}
		time.Sleep(200 * time.Millisecond)
		for _, s := range sends {
			if !s.pass && d.sink.Got(s.src, s.from.name+" to "+d.name) {
				t.Errorf("%s received pod %s's forged source %s (it must be dropped)", d.name, s.from.name, s.src)
			}
		}
	}
	for _, p := range []*pod{a, b, router} {
		n.removePod(ctx, t, p)
	}
	checkPodwireLeftovers(t, n)
}
