package integration

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/podwire/podwire/internal/testns"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// The uplink of the node-table tests: a veth "uplink0" in the node netns whose
// peer "lb0" sits in a peer netns that plays the cloud: the load balancer
// (its probe source is the Azure link-local fe80::1234:5678:9abc, which is
// also the node's IPv6 router) and the outside world (servers the pods reach
// through the egress IPs).
var (
	probeFrom = netip.MustParseAddr("fe80::1234:5678:9abc")
	probeTo   = netip.MustParseAddr("2603:1062:0:1:fe80:1234:5678:9abc")

	nodeUp4, peerUp4 = netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.1")
	nodeUp6          = netip.MustParseAddr("2001:db8:1::2")

	egress4, egress6 = netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8:e::10")
	// Outside servers in the peer: the first pair is SNATed, the second lies
	// in exceptCIDRs.
	ext4, ext6             = netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8:ff::1")
	extExcept4, extExcept6 = netip.MustParseAddr("198.51.100.200"), netip.MustParseAddr("2001:db8:fe::1")
)

// dialTimeout bounds each test connection: generous, since a loaded CI
// machine may lose a SYN to neighbour resolution and retransmit it (1 s, 3 s).
const dialTimeout = 10 * time.Second

// egressConf is the egress config of the tests. The pod CIDR is deliberately
// not in exceptCIDRs: pod-to-pod on the node must keep the source anyway.
func egressConf() map[string]any {
	return map[string]any{
		"ips":         []string{egress4.String(), egress6.String()},
		"exceptCIDRs": []string{"198.51.100.128/25", "2001:db8:fe::/48"},
	}
}

// uplink wires the node to a new peer netns and returns the peer. With
// defaultRoute6 false the node has no IPv6 default route (a router
// advertisement is to install it).
func uplink(t *testing.T, n *node, defaultRoute6 bool) ns.NetNS {
	t.Helper()
	peer := testns.New(t)
	n.Do(func() error {
		for _, c := range [][]string{
			{"link", "add", "uplink0", "type", "veth", "peer", "name", "lb0", "netns", filepath.Base(peer.Path())},
			{"link", "set", "uplink0", "up"},
			{"addr", "add", nodeUp4.String() + "/24", "dev", "uplink0"},
			{"addr", "add", nodeUp6.String() + "/64", "dev", "uplink0", "nodad"},
			{"addr", "add", egress4.String() + "/32", "dev", "uplink0"},
			// Deprecated, so that source selection (and a masquerade)
			// picks nodeUp6: the egress IP is only for podwire's SNAT.
			{"addr", "add", egress6.String() + "/128", "dev", "uplink0", "nodad", "preferred_lft", "0"},
			{"route", "add", "default", "via", peerUp4.String(), "dev", "uplink0"},
		} {
			if err := run("ip", c...); err != nil {
				return err
			}
		}
		// Forwarding is on: a router accepts RAs only with accept_ra=2.
		if _, err := sysctl.Sysctl("net.ipv6.conf.uplink0.accept_ra", "2"); err != nil {
			return err
		}
		if defaultRoute6 {
			return run("ip", "-6", "route", "add", "default", "via", probeFrom.String(), "dev", "uplink0")
		}
		return nil
	})
	err := peer.Do(func(ns.NetNS) error {
		for _, c := range [][]string{
			{"link", "set", "lo", "up"},
			{"link", "set", "lb0", "up"},
			{"addr", "add", probeFrom.String() + "/64", "dev", "lb0", "nodad"},
			{"addr", "add", "2001:db8:1::1/64", "dev", "lb0", "nodad"},
			{"addr", "add", peerUp4.String() + "/24", "dev", "lb0"},
			{"addr", "add", ext4.String() + "/32", "dev", "lo"},
			{"addr", "add", extExcept4.String() + "/32", "dev", "lo"},
			{"addr", "add", ext6.String() + "/128", "dev", "lo"},
			{"addr", "add", extExcept6.String() + "/128", "dev", "lo"},
			{"route", "add", n.Base.V4Pool, "via", nodeUp4.String()},
			{"route", "add", egress4.String() + "/32", "via", nodeUp4.String()},
			{"route", "add", n.Base.V6Pool, "via", nodeUp6.String()},
			{"route", "add", egress6.String() + "/128", "via", nodeUp6.String()},
		} {
			if err := run("ip", c...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return peer
}

// noChecksumOffload turns off tx and rx checksum offload of a link in netns,
// so that packets carry real checksums and the receiver verifies them: veth
// otherwise hands CHECKSUM_PARTIAL or CHECKSUM_UNNECESSARY packets along, and
// a stale L4 checksum after an address rewrite would go unnoticed.
func noChecksumOffload(t *testing.T, netns ns.NetNS, link string) {
	t.Helper()
	err := netns.Do(func(ns.NetNS) error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, cmd := range []uint32{unix.ETHTOOL_STXCSUM, unix.ETHTOOL_SRXCSUM} {
			val := [2]uint32{cmd, 0} // struct ethtool_value {cmd, data}
			var ifr [40]byte
			copy(ifr[:unix.IFNAMSIZ], link)
			binary.NativeEndian.PutUint64(ifr[unix.IFNAMSIZ:], uint64(uintptr(unsafe.Pointer(&val))))
			if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
				return fmt.Errorf("ethtool %#x on %s: %w", cmd, link, e)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hostVeth is the node side of a pod's ptp veth.
func (p *pod) hostVeth() string {
	for _, i := range p.Result.Interfaces {
		if i.Sandbox == "" {
			return i.Name
		}
	}
	return ""
}

// TestProbeSNAT: the load balancer's probe from the link-local
// fe80::1234:5678:9abc reaches a pod through the node, the pod sees it from
// 2603:1062:0:1:fe80:1234:5678:9abc, the answer goes back to the link-local
// address, and checksums stay valid both ways (offload off everywhere on the
// path, so every hop verifies them). The uplink is found by the default route.
func TestProbeSNAT(t *testing.T) {
	n := newNode(t)
	peer := uplink(t, n, true)
	p := n.mustAddPod(podSpec{podwire: map[string]any{"probeSNAT": map[string]any{"preset": "azure"}}})
	noChecksumOffload(t, peer, "lb0")
	noChecksumOffload(t, n.NS, "uplink0")
	noChecksumOffload(t, n.NS, p.hostVeth())
	noChecksumOffload(t, p.NS, "eth0")
	// A specific address: a wildcard "[::]" listener is IPv4-only when Go
	// probed the test process's own netns as without IPv6.
	srv := listenTCP(t, p.NS, netip.AddrPortFrom(p.v6, 0).String())
	dst := netip.AddrPortFrom(p.v6, srv.port())
	for i := range 3 {
		if err := dialTCP(peer, probeFrom.WithZone("lb0"), dst, dialTimeout); err != nil {
			t.Fatalf("probe %d from %s to %s: %v\n%s", i, probeFrom, dst, err, nftList(t, n.NS))
		}
	}
	if !srv.sawPeer(probeTo) {
		t.Fatalf("pod saw peers %v, want %s", srv.peers, probeTo)
	}
	if err := p.Check(); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
}

// TestProbeSNATKeepsRouterAdvertisements: with the probe table in place, a
// router advertisement from fe80::1234:5678:9abc (the probe source and the
// node's router) still installs the node's IPv6 default route: it must reach
// the kernel with its link-local source (RFC 4861 6.1.2).
func TestProbeSNATKeepsRouterAdvertisements(t *testing.T) {
	n := newNode(t)
	peer := uplink(t, n, false)
	conf := map[string]any{"probeSNAT": map[string]any{"preset": "azure", "interfaces": []string{"uplink0"}}}
	n.mustAddPod(podSpec{podwire: conf})
	if got := nftList(t, n.NS); !strings.Contains(got, "table ip6 podwire-probe-snat") {
		t.Fatalf("probe table missing:\n%s", got)
	}
	sendRA(t, peer, "lb0", 600)
	err := eventually(5*time.Second, func() error {
		var found bool
		err := n.NS.Do(func(ns.NetNS) error {
			routes, err := netlinksafe.RouteList(nil, netlink.FAMILY_V6)
			for _, r := range routes {
				if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.Equal(probeFrom.AsSlice()) && r.Protocol == unix.RTPROT_RA {
					found = true
				}
			}
			return err
		})
		if err == nil && !found {
			err = fmt.Errorf("no default route via %s learnt from the RA", probeFrom)
		}
		return err
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, nftList(t, n.NS))
	}
}

// sendRA sends one router advertisement (router lifetime in seconds) to
// ff02::1 on link, from the link's fe80::1234:5678:9abc, hop limit 255.
func sendRA(t *testing.T, netns ns.NetNS, link string, lifetime uint16) {
	t.Helper()
	err := netns.Do(func(ns.NetNS) error {
		c, err := net.ListenPacket("ip6:ipv6-icmp", probeFrom.WithZone(link).String())
		if err != nil {
			return err
		}
		defer c.Close()
		pc := ipv6.NewPacketConn(c)
		if err := pc.SetMulticastHopLimit(255); err != nil {
			return err
		}
		// RFC 4861 4.2: cur hop limit, flags, router lifetime, reachable
		// time, retrans timer; no options. The kernel fills the checksum.
		body := make([]byte, 12)
		body[0] = 64
		binary.BigEndian.PutUint16(body[2:], lifetime)
		msg := icmp.Message{Type: ipv6.ICMPTypeRouterAdvertisement, Body: &icmp.RawBody{Data: body}}
		b, err := msg.Marshal(nil)
		if err != nil {
			return err
		}
		ifi, err := net.InterfaceByName(link)
		if err != nil {
			return err
		}
		_, err = pc.WriteTo(b, &ipv6.ControlMessage{HopLimit: 255, IfIndex: ifi.Index},
			&net.IPAddr{IP: net.ParseIP("ff02::1"), Zone: link})
		return err
	})
	if err != nil {
		t.Fatalf("send RA: %v", err)
	}
}

// TestEgressIPs: a pod's IPv4 and IPv6 connections to the outside arrive
// from the egress IPs, with and without ptp's own masquerade (ipMasq) on the
// node; pod-to-pod traffic and destinations in exceptCIDRs keep the pod's
// source (with ipMasq on, excepted traffic is left to ptp's masquerade).
func TestEgressIPs(t *testing.T) {
	for _, masq := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipMasq=%v", masq), func(t *testing.T) {
			n := newNode(t)
			n.Base.IPMasq = masq
			peer := uplink(t, n, true)
			spec := podSpec{podwire: map[string]any{"egress": egressConf()}}
			a, b := n.mustAddPod(spec), n.mustAddPod(spec)
			for _, tc := range []struct {
				name     string
				dst      netip.Addr
				srvNS    ns.NetNS
				wantPeer netip.Addr
			}{
				// With ipMasq on, excepted traffic is ptp's to masquerade.
				{"outside IPv4", ext4, peer, egress4},
				{"outside IPv6", ext6, peer, egress6},
				{"exceptCIDRs IPv6", extExcept6, peer, map[bool]netip.Addr{false: a.v6, true: nodeUp6}[masq]},
				{"pod-to-pod IPv4", b.v4, b.NS, a.v4},
				{"pod-to-pod IPv6", b.v6, b.NS, a.v6},
				{"exceptCIDRs IPv4", extExcept4, peer, map[bool]netip.Addr{false: a.v4, true: nodeUp4}[masq]},
			} {
				srv := listenTCP(t, tc.srvNS, netip.AddrPortFrom(tc.dst, 0).String())
				if err := dialTCP(a.NS, netip.Addr{}, netip.AddrPortFrom(tc.dst, srv.port()), dialTimeout); err != nil {
					t.Fatalf("%s: dial %s: %v\n%s", tc.name, tc.dst, err, nftList(t, n.NS))
				}
				if !srv.sawPeer(tc.wantPeer) {
					t.Fatalf("%s: server saw %v, want %s\n%s", tc.name, srv.peers, tc.wantPeer, nftList(t, n.NS))
				}
			}
			if err := a.Check(); err != nil {
				t.Fatalf("CHECK: %v", err)
			}
			// DEL takes a's sources out of the sets; b's stay.
			if err := a.Del(); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			got := nftList(t, n.NS)
			if strings.Contains(got, a.v4.String()+" ") || !strings.Contains(got, b.v4.String()) {
				t.Fatalf("after DEL of %s: sets\n%s", a.v4, got)
			}
			if err := b.Check(); err != nil {
				t.Fatalf("CHECK of b after DEL of a: %v", err)
			}
		})
	}
}

// nftList is `nft list ruleset` of netns, for failure messages and checks.
func nftList(t *testing.T, netns ns.NetNS) string {
	t.Helper()
	var out []byte
	_ = netns.Do(func(ns.NetNS) error {
		var err error
		out, err = execOutput("nft", "list", "ruleset")
		if err != nil {
			out = append(out, []byte(err.Error())...)
		}
		return nil
	})
	return string(out)
}

// ourTables lists the tables of netns as "family name", and the number of
// rules of every podwire chain ("table/chain" -> rules).
func ourTables(t *testing.T, netns ns.NetNS) (tables []string, rules map[string]int) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(netns.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range ts {
		tables = append(tables, familyName(tb.Family)+" "+tb.Name)
	}
	chains, err := c.ListChains()
	if err != nil {
		t.Fatal(err)
	}
	rules = map[string]int{}
	for _, ch := range chains {
		rs, err := c.GetRules(ch.Table, ch)
		if err != nil {
			t.Fatal(err)
		}
		rules[familyName(ch.Table.Family)+" "+ch.Table.Name+"/"+ch.Name] = len(rs)
	}
	return tables, rules
}

func familyName(f nftables.TableFamily) string {
	return map[nftables.TableFamily]string{
		nftables.TableFamilyINet: "inet", nftables.TableFamilyIPv4: "ip", nftables.TableFamilyIPv6: "ip6",
		nftables.TableFamilyBridge: "bridge", nftables.TableFamilyARP: "arp", nftables.TableFamilyNetdev: "netdev",
	}[f]
}

// execOutput runs a command in the calling thread's netns and returns its
// combined output.
func execOutput(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// nodeTablesConf is the probe + egress config of the race and repair tests.
func nodeTablesConf(extraExcept ...string) map[string]any {
	eg := egressConf()
	eg["exceptCIDRs"] = append(eg["exceptCIDRs"].([]string), extraExcept...)
	return map[string]any{"probeSNAT": map[string]any{"preset": "azure"}, "egress": eg}
}

// wantRules are the rule counts of the node-table chains for nodeTablesConf.
var wantRules = map[string]int{
	"ip6 podwire-probe-snat/prerouting":   2,
	"ip6 podwire-probe-snat/postrouting":  1,
	"inet podwire-egress/nat-postrouting": 2,
}

// rebuilds counts the ADDs that laid down or repaired the node tables.
func (n *node) rebuilds() int { return strings.Count(n.Log(), "node tables laid down or repaired") }

// egressSources returns the addresses in the egress table's pod sets.
func egressSources(t *testing.T, netns ns.NetNS) map[netip.Addr]bool {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(netns.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Addr]bool{}
	tb := &nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire-egress"}
	for _, set := range []*nftables.Set{
		{Table: tb, Name: "pods4", KeyType: nftables.TypeIPAddr},
		{Table: tb, Name: "pods6", KeyType: nftables.TypeIP6Addr},
	} {
		elems, err := c.GetSetElements(set)
		if err != nil {
			t.Fatalf("set %s: %v", set.Name, err)
		}
		for _, e := range elems {
			a, _ := netip.AddrFromSlice(e.Key)
			out[a] = true
		}
	}
	return out
}

// checkNodeTables asserts one copy of each node table with its rules, and
// exactly the given pods' addresses as egress sources.
func checkNodeTables(t *testing.T, n *node, pods ...*pod) {
	t.Helper()
	tables, rules := ourTables(t, n.NS)
	seen := map[string]int{}
	for _, tb := range tables {
		seen[tb]++
	}
	for _, tb := range []string{"ip6 podwire-probe-snat", "inet podwire-egress"} {
		if seen[tb] != 1 {
			t.Fatalf("table %s present %d times; tables %v", tb, seen[tb], tables)
		}
	}
	for ch, want := range wantRules {
		if rules[ch] != want {
			t.Fatalf("chain %s has %d rules, want %d\n%s", ch, rules[ch], want, nftList(t, n.NS))
		}
	}
	got := egressSources(t, n.NS)
	want := map[netip.Addr]bool{}
	for _, p := range pods {
		want[p.v4], want[p.v6] = true, true
	}
	for a := range want {
		if !got[a] {
			t.Fatalf("egress source %s missing; sets hold %v", a, got)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("egress sets hold %v, want the addresses of %d pods", got, len(pods))
	}
}

// TestNodeTablesFirstADDRace: 16 concurrent first ADDs on a fresh node lay the
// tables down once (one invocation rebuilds, the others find them current
// under the node lock), with every pod's elements; 20 times in a row.
func TestNodeTablesFirstADDRace(t *testing.T) {
	const pods = 16
	for i := range 20 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			n := newNode(t)
			uplink(t, n, true)
			ps := make([]*pod, pods)
			errs := make([]error, pods)
			var wg sync.WaitGroup
			for j := range pods {
				wg.Go(func() { ps[j], errs[j] = n.addPod(podSpec{podwire: nodeTablesConf()}) })
			}
			wg.Wait()
			for j, err := range errs {
				if err != nil {
					t.Fatalf("ADD %d: %v\nlog:\n%s", j, err, n.Log())
				}
			}
			if r := n.rebuilds(); r != 1 {
				t.Fatalf("%d ADDs rebuilt the node tables, want exactly 1\nlog:\n%s", r, n.Log())
			}
			checkNodeTables(t, n, ps...)
		})
	}
}

// TestNodeTablesRepair: a flushed ruleset (google/nftables FlushRuleset in the
// node netns), a deleted podwire table and a changed config are each repaired
// by the next ADD, 20 times in a row, with the elements of the pods that were
// there before; a table that is not podwire's is never touched. Packets prove
// the old pods' elements work at the end.
func TestNodeTablesRepair(t *testing.T) {
	n := newNode(t)
	peer := uplink(t, n, true)
	var old []*pod
	for range 3 {
		old = append(old, n.mustAddPod(podSpec{podwire: nodeTablesConf()}))
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(n.NS.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	foreign := func() {
		tb := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "foreign"})
		ch := c.AddChain(&nftables.Chain{Name: "input", Table: tb, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter})
		c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{&expr.Counter{}}})
		if err := c.Flush(); err != nil {
			t.Fatalf("foreign table: %v", err)
		}
	}
	foreign()
	for _, damage := range []string{"flush ruleset", "delete table", "change config"} {
		for i := range 20 {
			conf := nodeTablesConf()
			switch damage {
			case "flush ruleset":
				c.FlushRuleset()
				if err := c.Flush(); err != nil {
					t.Fatal(err)
				}
				foreign()
			case "delete table":
				victim := []*nftables.Table{
					{Family: nftables.TableFamilyIPv6, Name: "podwire-probe-snat"},
					{Family: nftables.TableFamilyINet, Name: "podwire-egress"},
				}[i%2]
				c.DelTable(victim)
				if err := c.Flush(); err != nil {
					t.Fatal(err)
				}
			case "change config":
				if i%2 == 0 {
					conf = nodeTablesConf("198.51.100.64/26")
				}
			}
			before := n.rebuilds()
			p := n.mustAddPod(podSpec{podwire: conf})
			if got := n.rebuilds() - before; got != 1 {
				t.Fatalf("%s %d: %d rebuilds by the next ADD, want 1\nlog:\n%s", damage, i, got, n.Log())
			}
			checkNodeTables(t, n, append(old, p)...)
			if err := p.Check(); err != nil {
				t.Fatalf("%s %d: CHECK: %v", damage, i, err)
			}
			_, rules := ourTables(t, n.NS)
			if rules["inet foreign/input"] != 1 {
				t.Fatalf("%s %d: foreign table changed: %v", damage, i, rules)
			}
			if err := p.Del(); err != nil {
				t.Fatalf("%s %d: DEL: %v", damage, i, err)
			}
			checkNodeTables(t, n, old...)
		}
	}
	// The old pods still work through the repaired tables.
	srv := listenTCP(t, peer, netip.AddrPortFrom(ext4, 0).String())
	if err := dialTCP(old[0].NS, netip.Addr{}, netip.AddrPortFrom(ext4, srv.port()), dialTimeout); err != nil || !srv.sawPeer(egress4) {
		t.Fatalf("egress after repairs: err %v, peers %v", err, srv.peers)
	}
	probe := listenTCP(t, old[1].NS, netip.AddrPortFrom(old[1].v6, 0).String())
	if err := dialTCP(peer, probeFrom.WithZone("lb0"), netip.AddrPortFrom(old[1].v6, probe.port()), dialTimeout); err != nil || !probe.sawPeer(probeTo) {
		t.Fatalf("probe after repairs: err %v, peers %v", err, probe.peers)
	}
}

// TestEgressIPFromNodeAnnotation: with egress.nodeAnnotation the egress IPs
// come from the node's podwire.io/egress-ip annotation, which the agent
// writes into stateDir and the plugin reads from there (no API call); before
// the agent has written it, ADD fails with CNI error 11.
func TestEgressIPFromNodeAnnotation(t *testing.T) {
	n := newNode(t)
	peer := uplink(t, n, true)
	conf := map[string]any{"egress": map[string]any{"nodeAnnotation": true, "exceptCIDRs": []string{"198.51.100.128/25"}}}
	if _, err := n.addPod(podSpec{podwire: conf}); cniCode(err) != 11 {
		t.Fatalf("ADD before the agent wrote the annotation: %v (code %d), want code 11", err, cniCode(err))
	}
	n.startAgent(n.primaryList("1.0.0", nil), n.podwireEntry(conf),
		knode("worker-1", map[string]string{"podwire.io/egress-ip": egress4.String() + "," + egress6.String()}))
	n.waitEgressFile()
	a := n.mustAddPod(podSpec{podwire: conf})
	for _, tc := range []struct{ dst, want netip.Addr }{{ext4, egress4}, {ext6, egress6}} {
		srv := listenTCP(t, peer, netip.AddrPortFrom(tc.dst, 0).String())
		if err := dialTCP(a.NS, netip.Addr{}, netip.AddrPortFrom(tc.dst, srv.port()), dialTimeout); err != nil || !srv.sawPeer(tc.want) {
			t.Fatalf("to %s: err %v, peers %v, want %s\n%s", tc.dst, err, srv.peers, tc.want, nftList(t, n.NS))
		}
	}
}
