package integration

import (
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/integration/cnitest"
)

// Netlink under churn. The kernel flags a dump NLM_F_DUMP_INTR when the table
// changes between two of its parts, and vishvananda/netlink (since v1.2.1)
// returns ErrDumpInterrupted for it: on a busy node, where other pods' links,
// addresses and routes come and go all the time, a podwire ADD that passed
// that error on would fail the pod. podwire's dumps go through
// containernetworking/plugins/pkg/netlinksafe, which retries them
// (a forbidigo rule of .golangci.yml keeps it so).
//
// Link and address dumps are the ones the kernel flags (rtnl_dump_ifinfo,
// inet_dump_ifaddr, inet6_dump_addr check dev_base_seq / the address
// generation); IPv4 and IPv6 route dumps are not flagged. A dump is only
// flagged when it spans several messages, so the node gets enough links and
// addresses to make its dumps multi-part. The VLAN paths (the uplink's
// address check, the bridge VLAN dump) need bridge VLAN filtering: their
// twin runs in the VM suite (integration/vm, TestNetlinkChurnVLAN).

// churnBase gives the node netns enough links and addresses that a link or
// address dump spans several netlink messages (cnitest.ChurnBase).
func churnBase(t *testing.T, n *node, pairs, addrs int) {
	t.Helper()
	n.Do(func() error { return cnitest.ChurnBase(pairs, addrs) })
}

// churner adds and removes links, addresses and routes in a netns until
// stopped, as the other pods of a busy node (and the runtime, and the
// primary plugin) do.
type churner struct {
	stop chan struct{}
	done chan error
	ops  atomic.Int64
}

// startChurn runs the churn in the node netns on a goroutine of its own;
// stopChurn ends it and returns its first error (the test goroutine reports
// it: t.Fatal only from there).
func startChurn(n *node) *churner {
	c := &churner{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		c.done <- n.NS.Do(func(ns.NetNS) error {
			for i := 0; ; i++ {
				select {
				case <-c.stop:
					return nil
				default:
				}
				if err := c.once(i); err != nil {
					return err
				}
			}
		})
	}()
	return c
}

// once is one cnitest.ChurnOnce, counted.
func (c *churner) once(i int) error {
	n, err := cnitest.ChurnOnce(i)
	c.ops.Add(int64(n))
	return err
}

func (c *churner) stopChurn() error {
	close(c.stop)
	return <-c.done
}

// podLinks names the node's links that are not the test's own (pods' host
// veths: ptp names them veth*).
func podLinks(t *testing.T, n *node) []string {
	t.Helper()
	var out []string
	n.Do(func() error {
		links, err := netlinksafe.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if name := l.Attrs().Name; strings.HasPrefix(name, "veth") {
				out = append(out, name)
			}
		}
		return nil
	})
	return out
}

// TestNetlinkChurn runs rounds of ADD, CHECK, STATUS and DEL through libcni
// (ptp + host-local, then podwire; a third of the pods are forwarding pods
// with a node route) while another goroutine adds and removes veth pairs,
// addresses and routes in the node netns, whose link and address dumps span
// several messages. Every verb must succeed, every pod must reach a server
// behind the node over IPv4 and IPv6 from its own address, and after each
// round's DELs the node holds no record, set element, route or host veth of
// the round's pods.
//
// Without VLAN pods, ADD and DEL read the node netns with GETs only; the
// dump on this path is STATUS's check of the uplink's addresses (a warning
// in the log when it fails: STATUS never fails for the uplink). The VLAN
// twin in the VM suite covers ADD's own dumps.
func TestNetlinkChurn(t *testing.T) {
	n := newNode(t)
	be := n.newBackend()
	srv := listenTCP(t, be.ns, "[::]:0")
	churnBase(t, n, 100, 300)
	conf := relConf()
	// STATUS checks the uplink: an idle veth, no global address.
	n.Do(func() error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink0"}, PeerName: "uplink0p"})
	})
	conf["uplink"] = "uplink0"
	spec := func(i int) podSpec {
		s := relSpec(i)
		s.podwire = conf
		return s
	}

	c := startChurn(n)
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		return c.stopChurn()
	}
	t.Cleanup(func() { _ = stop() })

	const rounds, perRound = 4, 6
	start := time.Now()
	var gone []int
	for r := range rounds {
		var live []relPod
		for k := range perRound {
			i := r*perRound + k
			p, err := n.addPod(spec(i))
			if err != nil {
				t.Fatalf("round %d: ADD of pod %d under churn (%d churn operations so far): %v\nlog (tail):\n%s",
					r, i, c.ops.Load(), err, relTail(n.Log(), 20))
			}
			live = append(live, relPod{p: p, i: i, fwd: i%3 == 0})
		}
		for _, rp := range live {
			if err := rp.p.Check(); err != nil {
				t.Fatalf("round %d: CHECK of pod %d under churn: %v", r, rp.i, err)
			}
			for _, dst := range []netip.Addr{be.v4, be.v6} {
				src := rp.p.addr(dst.Is6())
				if err := eventually(5*time.Second, func() error {
					return dialTCP(rp.p.NS, src, netip.AddrPortFrom(dst, srv.port()), time.Second)
				}); err != nil {
					t.Fatalf("round %d: pod %d %s -> server %s under churn: %v", r, rp.i, src, dst, err)
				}
				if !srv.sawPeer(src) {
					t.Fatalf("round %d: the server did not see pod %d's own address %s", r, rp.i, src)
				}
			}
		}
		// STATUS reads the uplink's addresses (a dump of every address of
		// the node); a failed read is a warning in the log, checked below.
		for range 10 {
			if err := n.status(live[0].p.List); err != nil {
				t.Fatalf("round %d: STATUS under churn: %v", r, err)
			}
		}
		if strings.Contains(n.Log(), netlink.ErrDumpInterrupted.Error()) {
			t.Fatalf("round %d: the log reports an interrupted netlink dump:\n%s", r, relTail(n.Log(), 20))
		}
		relAssertNode(t, n, live, gone)
		for k, rp := range live {
			if err := rp.p.Del(); err != nil {
				t.Fatalf("round %d: DEL of pod %d under churn: %v", r, rp.i, err)
			}
			if k%2 == 0 { // the runtime's second DEL: no netns, no prevResult
				if err := rp.p.DelNoNetns(); err != nil {
					t.Fatalf("round %d: second DEL of pod %d under churn: %v", r, rp.i, err)
				}
			}
			rp.p.ReleaseNS()
			gone = append(gone, rp.i)
		}
		relAssertNode(t, n, nil, gone)
		if t.Failed() {
			t.FailNow()
		}
	}
	ops := c.ops.Load()
	if err := stop(); err != nil {
		t.Fatalf("churn goroutine: %v", err)
	}
	if left := podLinks(t, n); len(left) > 0 {
		t.Fatalf("host veths left after every DEL: %v", left)
	}
	if cnt := n.podSetCount(); cnt != 0 {
		t.Fatalf("%d elements left in inet podwire after every DEL", cnt)
	}
	if ops < 100 {
		t.Fatalf("only %d churn operations ran during the ADDs: the test did not churn", ops)
	}
	if strings.Contains(n.Log(), netlink.ErrDumpInterrupted.Error()) {
		t.Fatalf("the log reports an interrupted netlink dump:\n%s", relTail(n.Log(), 20))
	}
	t.Logf("%d pods added, checked, reached and deleted in %v while %d link/address/route changes ran",
		rounds*perRound, time.Since(start), ops)
}
