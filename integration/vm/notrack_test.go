package vm

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/packets"
)

// Transit without conntrack on Debian's kernel: the VM twin of the native
// suite's TestForwardingNotrack (integration/transit_test.go), built with
// netlink and google/nftables since the VM has no nft(8).

// sysctlIn writes value to the sysctl path (relative to /proc/sys) in n.
func sysctlIn(t *testing.T, n ns.NetNS, path, value string) {
	t.Helper()
	if err := n.Do(func(ns.NetNS) error { return os.WriteFile("/proc/sys/"+path, []byte(value), 0o644) }); err != nil {
		t.Fatal(err)
	}
}

// routeIn adds the route dst via gw (none: invalid) on dev (none: "") in n.
func routeIn(t *testing.T, n ns.NetNS, dst string, gw netip.Addr, dev string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		r := &netlink.Route{Dst: mustIPNet(dst)}
		if gw.IsValid() {
			r.Gw = gw.AsSlice()
		}
		if dev != "" {
			l, err := netlinksafe.LinkByName(dev)
			if err != nil {
				return err
			}
			r.LinkIndex = l.Attrs().Index
		}
		return netlink.RouteAdd(r)
	})
	if err != nil {
		t.Fatalf("route %s via %s dev %s: %v", dst, gw, dev, err)
	}
}

func mustIPNet(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// dropInvalid adds in n what kube-proxy puts on every node: "ct state
// invalid drop" in a filter chain at forward. With it, a transit flow whose
// replies bypass the node breaks when the node tracks it (the node sees the
// SYN, never the SYN-ACK, and the next ACK is INVALID). Removed when t ends.
func dropInvalid(t *testing.T, n ns.NetNS) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(n.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire-test-invalid"})
	chain := c.AddChain(&nftables.Chain{Name: "forward", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitINVALID), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("ct state invalid drop: %v", err)
	}
	t.Cleanup(func() {
		c.DelTable(table)
		_ = c.Flush()
	})
}

// transitElements counts the elements of every set of inet podwire-transit
// in n.
func transitElements(t *testing.T, n ns.NetNS) int {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(n.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	sets, err := c.GetSets(&nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire-transit"})
	if err != nil {
		t.Fatalf("sets of inet podwire-transit: %v", err)
	}
	k := 0
	for _, s := range sets {
		els, err := c.GetSetElements(s)
		if err != nil {
			t.Fatal(err)
		}
		k += len(els)
	}
	return k
}

// TestForwardingNotrack: with forwarding.notrack, a router pod's transit
// traffic (a client behind it to a server behind the node) leaves no
// conntrack entry on the node, and a flow whose replies return by another
// path passes a node that drops INVALID as kube-proxy does; a
// Service-shaped DNAT to the router pod's own address still works
// (tracked: it ends at the pod). With notrack off (the control) the
// transit flow is tracked and the asymmetric one breaks. DEL leaves the
// transit table without elements.
func TestForwardingNotrack(t *testing.T) {
	for _, notrack := range []bool{true, false} {
		t.Run(fmt.Sprintf("notrack=%v", notrack), func(t *testing.T) {
			n := newNode(t, map[string]any{"forwarding": map[string]any{
				"namespaces":       []string{"nf-*"},
				"routablePrefixes": []string{"198.51.100.0/24"},
				"notrack":          notrack,
			}})
			sysctlIn(t, n.NS, "net/ipv4/ip_forward", "1")

			// The server, behind the node: srv0 192.0.2.1/24 on the node,
			// 192.0.2.2 in its netns, default route via the node.
			be, srv := newNS(t), netip.MustParseAddr("192.0.2.2")
			addVeth(t, n.NS, "srv0", be, "eth0")
			addAddr(t, n.NS, "srv0", "192.0.2.1/24")
			addAddr(t, be, "eth0", "192.0.2.2/24")
			routeIn(t, be, "0.0.0.0/0", netip.MustParseAddr("192.0.2.1"), "")

			// The router pod and the client network behind it: cl0
			// 198.51.100.1/24 in the pod, the client 198.51.100.10.
			f := n.mustAddPodIn("nf-edge", "router", map[string]string{
				"podwire.io/forwarding": "true", "podwire.io/routes": "198.51.100.0/24"})
			fv4 := primaryIPv4(t, f)
			routeIn(t, f.NS, "192.0.2.0/24", gatewayOf(t, f), "eth0")
			cns, client := newNS(t), netip.MustParseAddr("198.51.100.10")
			addVeth(t, f.NS, "cl0", cns, "eth0")
			addAddr(t, f.NS, "cl0", "198.51.100.1/24")
			addAddr(t, cns, "eth0", "198.51.100.10/24")
			routeIn(t, cns, "0.0.0.0/0", netip.MustParseAddr("198.51.100.1"), "")

			dropInvalid(t, n.NS)
			const port, ownPort = 8080, 9090
			serveToken(t, be, port, "server")
			serveToken(t, f.NS, ownPort, "router")
			addServiceDNAT(t, n.NS, netip.MustParseAddr("10.96.0.50"), ownPort, fv4)

			// Transit, symmetric.
			if got, err := fetchToken(cns, netip.AddrPortFrom(srv, port), 5*time.Second); err != nil || got != "server" {
				t.Fatalf("client %s -> server %s through the router: %q %v\nlog:\n%s", client, srv, got, err, n.Log())
			}
			if err := packets.CheckTracked(n.NS, client, notrack); err != nil {
				t.Fatal(err)
			}

			// The router pod's own Service: DNAT to its own address.
			if got, err := fetchToken(be, netip.AddrPortFrom(netip.MustParseAddr("10.96.0.50"), ownPort), 3*time.Second); err != nil || got != "router" {
				t.Fatalf("Service-shaped DNAT to the router's own %s: %q %v", fv4, got, err)
			}

			// Transit, asymmetric: the server answers the client over a
			// direct link, so the node sees only the client's half.
			addVeth(t, be, "asym0", cns, "asym1")
			routeIn(t, be, client.String()+"/32", netip.Addr{}, "asym0")
			sysctlIn(t, cns, "net/ipv4/conf/all/rp_filter", "0")
			sysctlIn(t, cns, "net/ipv4/conf/asym1/rp_filter", "0")
			_, err := fetchToken(cns, netip.AddrPortFrom(srv, port), 2*time.Second)
			if err := packets.CheckAsymmetric(notrack, err); err != nil {
				t.Fatal(err)
			}
			if !notrack {
				return
			}
			if err := f.Del(); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if k := transitElements(t, n.NS); k != 0 {
				t.Errorf("inet podwire-transit holds %d elements after the router's DEL, want 0", k)
			}
		})
	}
}

// gatewayOf is the IPv4 gateway of the pod's primary address (ptp's).
func gatewayOf(t *testing.T, p *cnitest.Pod) netip.Addr {
	t.Helper()
	for _, ip := range p.Result.IPs {
		if g, ok := netip.AddrFromSlice(ip.Gateway.To4()); ok && ip.Gateway != nil {
			return g
		}
	}
	t.Fatalf("pod has no IPv4 gateway: %v", p.Result.IPs)
	return netip.Addr{}
}
