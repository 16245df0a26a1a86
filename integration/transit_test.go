package integration

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/packets"
)

// invalidDrop is what kube-proxy puts on every node: conntrack's INVALID
// packets are dropped in forward. With it, a transit flow whose replies
// bypass the node breaks when the node tracks it (the node sees the SYN,
// never the SYN-ACK, and the next ACK is INVALID in SYN_SENT).
const invalidDrop = `table inet pwtest-invalid {
	chain forward {
		type filter hook forward priority filter; policy accept;
		ct state invalid drop
	}
}
table ip pwtest-svc {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 10.96.0.50 tcp dport 8080 dnat to %s:%d
	}
}
`

// TestForwardingNotrack: with forwarding.notrack, a router pod's transit
// traffic (a client behind it to a server behind the node) leaves no
// conntrack entry on the node, and a flow whose replies return by another
// path (the server answers the client over a direct link) passes a node
// that drops INVALID as kube-proxy does; a Service-shaped DNAT to the
// router pod's own address still works (tracked: it ends at the pod). With
// notrack off (the control) the transit flow is tracked and the asymmetric
// one breaks.
func TestForwardingNotrack(t *testing.T) {
	for _, notrack := range []bool{true, false} {
		t.Run(fmt.Sprintf("notrack=%v", notrack), func(t *testing.T) {
			n := newNode(t)
			conf := map[string]any{"forwarding": map[string]any{
				"namespaces":       []string{"nf-*"},
				"routablePrefixes": []string{"198.51.100.0/24"},
				"notrack":          notrack,
			}}
			be := n.newBackend()
			f := n.mustAddPod(podSpec{namespace: "nf-edge", podwire: conf, annotations: map[string]string{
				"podwire.io/forwarding": "true", "podwire.io/routes": "198.51.100.0/24",
			}})
			cns, c4, _ := clientBehind(t, f)
			own := listenTCP(t, f.NS, "0.0.0.0:0")
			n.Do(func() error {
				cmd := exec.Command("nft", "-f", "-")
				cmd.Stdin = strings.NewReader(fmt.Sprintf(invalidDrop, f.v4, own.port()))
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("nft: %v: %s", err, out)
				}
				return nil
			})
			t.Cleanup(func() {
				n.Do(func() error {
					return runAll([][]string{{"nft", "delete", "table", "inet", "pwtest-invalid"}, {"nft", "delete", "table", "ip", "pwtest-svc"}})
				})
			})
			srv := listenTCP(t, be.ns, "0.0.0.0:0")

			// Transit, symmetric.
			if err := eventually(5*time.Second, func() error {
				return dialTCP(cns, netip.Addr{}, netip.AddrPortFrom(be.v4, srv.port()), time.Second)
			}); err != nil {
				t.Fatalf("client %s -> server %s through the router: %v", c4, be.v4, err)
			}
			if err := packets.CheckTracked(n.NS, c4, notrack); err != nil {
				t.Fatalf("%v\n%s", err, nftList(t, n.NS))
			}

			// The router pod's own Service: DNAT to its own address.
			if err := eventually(3*time.Second, func() error {
				return dialTCP(be.ns, netip.Addr{}, netip.MustParseAddrPort("10.96.0.50:8080"), time.Second)
			}); err != nil || !own.sawPeer(be.v4) {
				t.Fatalf("Service-shaped DNAT to the router's own %s: %v, peers %v", f.v4, err, own.peers)
			}

			// Transit, asymmetric: the server answers the client over a
			// direct link, so the node sees only the client's half.
			vethPair(t, be.ns, "asym0", cns, "asym1")
			doIn(t, be.ns, [][]string{
				{"ip", "link", "set", "asym0", "up"},
				{"ip", "route", "add", c4.String() + "/32", "dev", "asym0"},
			})
			doIn(t, cns, [][]string{
				{"ip", "link", "set", "asym1", "up"},
				{"sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.asym1.rp_filter=0"},
			})
			err := dialTCP(cns, netip.Addr{}, netip.AddrPortFrom(be.v4, srv.port()), 2*time.Second)
			if err := packets.CheckAsymmetric(notrack, err); err != nil {
				t.Fatal(err)
			}
			if !notrack {
				return
			}
			// DEL takes the pod's transit elements, intervals included.
			if err := f.Del(); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			out := nftList(t, n.NS)
			i := strings.Index(out, "table inet podwire-transit")
			if i < 0 {
				t.Fatalf("transit table gone after the DEL (the config still wants it):\n%s", out)
			}
			if table, _, _ := strings.Cut(out[i+1:], "\ntable "); strings.Contains(table, "elements") {
				t.Fatalf("transit table after the DEL (want it present and empty):\n%s", out)
			}
		})
	}
}
