package vm

import (
	"errors"
	"fmt"
	"io"
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
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/cnitest"
)

// TestBrNetfilter proves with TCP what br_netfilter does to a VLAN pod's
// bridged traffic on podwire's bridge, with a kube-proxy-shaped Service rule
// in the node netns ("ip daddr VIP tcp dport P dnat to backend:P" at
// prerouting dstnat) whose VIP a tenant's server on VLAN 100 also holds:
// VLAN addresses are the tenant's and may overlap the cluster's Service CIDR.
// The client on VLAN 100 connects to VIP:P on-link, so the SYN is a bridged
// frame from the client's port to the server's port.
//
// The kernel path (net/bridge/br_netfilter_hooks.c): br_nf_pre_routing, at
// the bridge's NF_BR_PRE_ROUTING hook, passes an untagged IPv4 frame of a
// port (a pod's access port: IS_IP) to the IPv4 PRE_ROUTING hooks unless
// both the netns's net.bridge.bridge-nf-call-iptables and the bridge's
// nf_call_iptables are 0. There conntrack and the Service's DNAT rewrite
// the destination; br_nf_pre_routing_finish sees the destination changed
// and routes the frame: to the backend through the node (the frame is taken
// off the bridge) or, when the route leads back to the bridge, bridged to the
// backend's MAC. Either way the tenant's server never sees the SYN, and the
// replies of a bridged flow are de-NATed by the same conntrack entry.
//
// The switch is an OR: the bridge attribute podwire turns off keeps its
// bridge out of the IPv4 hooks only while the netns sysctl is 0. So podwire's
// port check chain (bridge prerouting, priority filter, ahead of
// br_netfilter's hook NF_BR_PRI_BRNF) begins with "notrack" for frames
// entering from a pod's port or the uplink: the IPv4 hooks then find the
// frame untracked, and NAT acts only on tracked packets. The first two cases
// are podwire's bridge under either sysctl; the controls delete podwire's
// port check table (with it the notrack rules) and show the flow DNATed away,
// under sysctl 1 and under sysctl 0 with the bridge attribute turned on.
//
// Each case reads the DNAT rule's counter (did the bridged SYN reach the IPv4
// hooks?) and the answer the client reads (whose server answered?).
func TestBrNetfilter(t *testing.T) {
	require(t, capVLANFiltering)
	loadBrNetfilter(t)
	n := newNode(t, vlanConf(nil))
	addUplink(t, n, "uplink0")

	const port = 8080
	vip := netip.MustParseAddr("10.96.0.10")
	client := n.mustAddPod(map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "10.96.0.20/24"})
	tenant := n.mustAddPod(map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": vip.String() + "/24"})
	backend := n.mustAddPod(nil)
	backendIP := primaryIPv4(t, backend)
	serveToken(t, tenant.NS, port, "tenant")
	serveToken(t, backend.NS, port, "backend")
	dnat := addServiceDNAT(t, n.NS, vip, port, backendIP)

	for _, tc := range []struct {
		name string
		// sysctl is the node netns's net.bridge.bridge-nf-call-iptables
		// (and ip6tables); bridgeOn turns podwire0's nf_call_iptables back on.
		sysctl   string
		bridgeOn bool
		// noPortCheck deletes podwire's table bridge podwire-port, its
		// notrack rules with it (the controls, run last).
		noPortCheck bool
		hooked      bool
	}{
		{name: "podwire's bridge, node sysctl 0", sysctl: "0"},
		{name: "podwire's bridge, node sysctl 1", sysctl: "1"},
		{name: "control: no podwire notrack, node sysctl 1", sysctl: "1", noPortCheck: true, hooked: true},
		{name: "control: no podwire notrack, nf_call_iptables on the bridge, node sysctl 0", sysctl: "0", bridgeOn: true, noPortCheck: true, hooked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cnitest.Sysctls(n.NS,
				[2]string{"net.bridge.bridge-nf-call-iptables", tc.sysctl},
				[2]string{"net.bridge.bridge-nf-call-ip6tables", tc.sysctl})
			if err != nil {
				t.Fatal(err)
			}
			setBridgeNfCallIptables(t, n.NS, "podwire0", tc.bridgeOn)
			if tc.noPortCheck {
				n.Do(func() error {
					c, err := nftables.New()
					if err != nil {
						return err
					}
					c.DelTable(&nftables.Table{Family: nftables.TableFamilyBridge, Name: "podwire-port"})
					if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
						return err
					}
					return nil
				})
			}
			before := dnat.packets(t)
			got, err := fetchToken(client.NS, netip.AddrPortFrom(vip, port), 3*time.Second)
			hooked := dnat.packets(t) > before
			t.Logf("client read %q (%v); DNAT rule hit: %v", got, err, hooked)
			if hooked != tc.hooked {
				t.Errorf("bridged SYN reached the IPv4 PRE_ROUTING hook: %v, want %v", hooked, tc.hooked)
			}
			if want := !tc.hooked; (got == "tenant") != want {
				t.Errorf("client reached the tenant's server on its own VLAN: %v, want %v (read %q, %v)", !want, want, got, err)
			}
		})
	}
	setBridgeNfCallIptables(t, n.NS, "podwire0", false)
}

// loadBrNetfilter loads br_netfilter (the VM's initramfs holds it in
// /lib/modules without loading it) and unloads it when t ends, so the rest
// of the suite runs without it. Loading sets every netns's
// bridge-nf-call-* to 1; the test sets its node netns's own.
func loadBrNetfilter(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/sys/module/br_netfilter"); err == nil {
		return
	}
	f, err := os.Open("/lib/modules/br_netfilter.ko")
	if err == nil {
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
	}
	if err != nil {
		msg := fmt.Sprintf("cannot load br_netfilter: %v; the VM suite runs this (make test-vm)", err)
		if inVM() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if err := unix.DeleteModule("br_netfilter", unix.O_NONBLOCK); err != nil {
			t.Errorf("failed to unload br_netfilter: %v", err)
		}
	})
}

// setBridgeNfCallIptables sets the bridge attribute IFLA_BR_NF_CALL_IPTABLES
// of name in n.
func setBridgeNfCallIptables(t *testing.T, n ns.NetNS, name string, on bool) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(name)
		if err != nil {
			return err
		}
		v := byte(0)
		if on {
			v = 1
		}
		req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
		msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
		msg.Index = int32(l.Attrs().Index)
		req.AddData(msg)
		info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
		info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("bridge"))
		info.AddRtAttr(nl.IFLA_INFO_DATA, nil).AddRtAttr(nl.IFLA_BR_NF_CALL_IPTABLES, []byte{v})
		req.AddData(info)
		_, err = req.Execute(unix.NETLINK_ROUTE, 0)
		return err
	})
	if err != nil {
		t.Fatalf("failed to set nf_call_iptables of %s to %v: %v", name, on, err)
	}
}

// primaryIPv4 is the pod's IPv4 address on eth0 (ptp + host-local).
func primaryIPv4(t *testing.T, p *cnitest.Pod) netip.Addr {
	t.Helper()
	for _, ip := range p.Result.IPs {
		if ip.Interface != nil && p.Result.Interfaces[*ip.Interface].Name == "eth0" && ip.Address.IP.To4() != nil {
			a, _ := netip.AddrFromSlice(ip.Address.IP.To4())
			return a
		}
	}
	t.Fatalf("pod has no IPv4 address on eth0: %v", p.Result.IPs)
	return netip.Addr{}
}

// serveToken listens on TCP port in n and writes token to every connection.
func serveToken(t *testing.T, n ns.NetNS, port int, token string) {
	t.Helper()
	var l net.Listener
	err := n.Do(func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, token)
			c.Close()
		}
	}()
}

// fetchToken connects from n to dst over TCP and returns what the server
// wrote, within timeout.
func fetchToken(n ns.NetNS, dst netip.AddrPort, timeout time.Duration) (string, error) {
	var c net.Conn
	err := n.Do(func(ns.NetNS) error {
		var err error
		c, err = net.DialTimeout("tcp4", dst.String(), timeout)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	b, err := io.ReadAll(c)
	return string(b), err
}

// serviceDNAT is the test's own table "ip podwire-test-svc" in a node netns.
type serviceDNAT struct {
	netns ns.NetNS
	table *nftables.Table
	chain *nftables.Chain
}

// addServiceDNAT adds, in n, kube-proxy's shape of a ClusterIP Service:
// "ip daddr vip tcp dport port counter dnat to backend:port" in a nat chain
// at prerouting, priority dstnat. The table is removed when t ends.
func addServiceDNAT(t *testing.T, n ns.NetNS, vip netip.Addr, port uint16, backend netip.Addr) *serviceDNAT {
	t.Helper()
	s := &serviceDNAT{netns: n, table: &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "podwire-test-svc"}}
	c, err := nftables.New(nftables.WithNetNSFd(int(n.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	c.AddTable(s.table)
	s.chain = c.AddChain(&nftables.Chain{
		Name: "nat-prerouting", Table: s.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest,
	})
	vip4, backend4 := vip.As4(), backend.As4()
	c.AddRule(&nftables.Rule{Table: s.table, Chain: s.chain, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: vip4[:]},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Counter{},
		&expr.Immediate{Register: 1, Data: backend4[:]},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2},
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("failed to add the Service's DNAT rule: %v", err)
	}
	t.Cleanup(func() {
		c.DelTable(s.table)
		if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			t.Errorf("failed to delete table ip podwire-test-svc: %v", err)
		}
	})
	return s
}

// packets is the DNAT rule's counter.
func (s *serviceDNAT) packets(t *testing.T) uint64 {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(s.netns.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.GetRules(s.table, s.chain)
	if err != nil {
		t.Fatalf("failed to read the Service's DNAT rule: %v", err)
	}
	for _, r := range rules {
		for _, e := range r.Exprs {
			if ctr, ok := e.(*expr.Counter); ok {
				return ctr.Packets
			}
		}
	}
	t.Fatal("the Service's DNAT rule has no counter")
	return 0
}
