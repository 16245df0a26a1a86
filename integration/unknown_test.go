package integration

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/podwire/podwire/pkg/agent"
)

// TestUnknownInterfaces: a pod wired through the primary alone (as the
// runtime does while a primary's rewrite has left podwire out of its
// conflist) has a host veth without a record. The agent names it in its
// status; with unknownInterfaces=drop it then checks the veth's sources as
// a pod's, from the addresses the node routes to it: the pod's own traffic
// still passes, a forged source the node routes to it is dropped. With
// report (the control) the same forgery passes. After the pod's DEL the
// agent forgets it. A pod wired with podwire is never named.
func TestUnknownInterfaces(t *testing.T) {
	for _, mode := range []string{agent.UnknownDrop, agent.UnknownReport} {
		t.Run(mode, func(t *testing.T) {
			n := newNode(t)
			ta := n.startAgentWith(func(c *agent.Config) { c.UnknownInterfaces = mode },
				n.primaryList("0.3.1", nil), n.podwireEntry(nil), knode("worker-1", nil))
			checked := n.mustAddPod(podSpec{})
			primaryOnly, err := libcni.ConfListFromBytes(n.primaryList("0.3.1", nil))
			if err != nil {
				t.Fatal(err)
			}
			u := n.mustAddPod(podSpec{list: primaryOnly})
			be := n.newBackend()
			srv := listenTCP(t, be.ns, "[::]:0")
			dst := netip.AddrPortFrom(be.v4, srv.port())
			spoof := spoofSetup(t, n, u, false)

			// Named within a tick or two, and (drop) checked after the grace.
			want := u.hostIf() + " (routed " + u.v4.String()
			if err := eventually(10*time.Second, func() error {
				st := ta.agent.Status()
				line := strings.Join(st.Unknown, "; ")
				if !strings.Contains(line, want) || strings.Contains(line, checked.hostIf()) {
					return fmt.Errorf("unknown interfaces %q, want %q and not the checked pod's %s", line, want, checked.hostIf())
				}
				if mode == agent.UnknownDrop && !strings.Contains(line, "checked") {
					return fmt.Errorf("unknown interfaces %q: not checked yet", line)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := eventually(3*time.Second, func() error { return dialTCP(u.NS, u.v4, dst, time.Second) }); err != nil {
				t.Fatalf("%s: the unknown pod's own traffic from %s: %v", mode, u.v4, err)
			}
			err = dialTCP(u.NS, spoof, dst, time.Second)
			if mode == agent.UnknownReport && err != nil {
				err = eventually(3*time.Second, func() error { return dialTCP(u.NS, spoof, dst, time.Second) })
			}
			switch {
			case mode == agent.UnknownDrop && (err == nil || srv.sawPeer(spoof)):
				t.Fatalf("drop: the unknown pod's forged source %s passed the node", spoof)
			case mode == agent.UnknownReport && err != nil:
				t.Fatalf("report: the unknown pod's forged source %s dropped (so the drop test proves nothing): %v", spoof, err)
			}

			if err := u.Del(); err != nil {
				t.Fatalf("DEL of the unknown pod: %v", err)
			}
			if err := eventually(10*time.Second, func() error {
				if st := ta.agent.Status(); len(st.Unknown) > 0 {
					return fmt.Errorf("unknown interfaces after the DEL: %q", st.Unknown)
				}
				for _, e := range n.setElements("checked") {
					if strings.Contains(e.Comment, "unknown interface") {
						return fmt.Errorf("element %q of an unknown interface left", e.Comment)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPrimaryRewriteLoop: a primary's installer rewrites its conflist
// without podwire again and again while pods are created from the conf dir
// as a runtime creates them (the file as it is at that moment): every
// other pod's ADD runs through the primary alone, before the agent puts
// podwire back. With unknownInterfaces=drop every pod ends checked: each
// forged source (one the node routes to the pod, so that only podwire's
// check can drop it) is dropped within the grace and a tick, and each
// pod's own traffic passes.
func TestPrimaryRewriteLoop(t *testing.T) {
	n := newNode(t)
	primary := n.primaryList("0.3.1", nil)
	ta := n.startAgentWith(func(c *agent.Config) { c.UnknownInterfaces = agent.UnknownDrop },
		primary, n.podwireEntry(nil), knode("worker-1", nil))
	confFile := filepath.Join(ta.confDir, "10-primary.conflist")
	be := n.newBackend()
	srv := listenTCP(t, be.ns, "[::]:0")
	dst := netip.AddrPortFrom(be.v4, srv.port())

	type forger struct {
		p     *pod
		spoof netip.Addr
	}
	var pods []forger
	without := 0
	for i := range 6 {
		if i%2 == 0 {
			if err := os.WriteFile(confFile, primary, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var list *libcni.NetworkConfigList
		if err := eventually(10*time.Second, func() error {
			l, err := libcni.ConfListFromFile(confFile)
			if err != nil {
				return err
			}
			if i%2 == 1 && len(l.Plugins) != 2 {
				return fmt.Errorf("podwire not back in %s yet", confFile)
			}
			list = l
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(list.Plugins) == 1 {
			without++
		}
		p := n.mustAddPod(podSpec{version: "0.3.1", list: list})
		spoof := netip.AddrFrom4([4]byte{10, 99, 0, byte(10 + i)})
		doIn(t, p.NS, [][]string{{"ip", "addr", "add", spoof.String() + "/32", "dev", "eth0"}})
		n.Do(func() error {
			return runAll([][]string{{"ip", "route", "add", spoof.String() + "/32", "via", p.v4.String(), "dev", p.hostIf()}})
		})
		pods = append(pods, forger{p, spoof})
	}
	if without != 3 {
		t.Fatalf("%d of 6 pods wired through the primary alone, want 3: the test would not exercise the window", without)
	}
	for i, f := range pods {
		if err := eventually(10*time.Second, func() error {
			if err := dialTCP(f.p.NS, f.spoof, dst, 500*time.Millisecond); err == nil {
				return fmt.Errorf("forged source %s passes", f.spoof)
			}
			return nil
		}); err != nil {
			t.Fatalf("pod %d (%s): %v; agent: %q", i, f.p.hostIf(), err, ta.agent.Status().Unknown)
		}
		if err := eventually(3*time.Second, func() error { return dialTCP(f.p.NS, f.p.v4, dst, time.Second) }); err != nil {
			t.Fatalf("pod %d: own traffic from %s: %v", i, f.p.v4, err)
		}
	}
	t.Logf("unknown interfaces, checked: %q", ta.agent.Status().Unknown)
}

// TestUnknownBridgePort: on a bridging primary (bridge plugin on cni0, as
// flannel delegates), a port of cni0 without a record is named; with
// unknownInterfaces=drop none of its sources pass once it is checked (the
// node does not know its addresses), while a pod wired with podwire on the
// same bridge keeps its own traffic.
func TestUnknownBridgePort(t *testing.T) {
	n := newBridgedNode(t)
	ta := n.startAgentWith(func(c *agent.Config) { c.UnknownInterfaces = agent.UnknownDrop },
		n.primaryList("0.3.1", nil), n.podwireEntry(nil), knode("worker-1", nil))
	be := n.newBackend()
	srv := listenTCP(t, be.ns, "[::]:0")
	dst := netip.AddrPortFrom(be.v4, srv.port())
	checked := n.mustAddPod(podSpec{name: "checked"})
	primaryOnly, err := libcni.ConfListFromBytes(n.primaryList("0.3.1", nil))
	if err != nil {
		t.Fatal(err)
	}
	u := n.mustAddPod(podSpec{name: "unknown", list: primaryOnly})
	if err := eventually(3*time.Second, func() error { return dialTCP(u.NS, u.v4, dst, time.Second) }); err != nil {
		t.Fatalf("the unknown pod's traffic before it is checked: %v (the drop below would prove nothing)", err)
	}
	want := hostVeth(t, u) + " (port of cni0) checked"
	if err := eventually(10*time.Second, func() error {
		if line := strings.Join(ta.agent.Status().Unknown, "; "); line != want {
			return fmt.Errorf("unknown interfaces %q, want %q", line, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := dialTCP(u.NS, u.v4, dst, time.Second); err == nil {
		t.Fatalf("the unknown bridge port's traffic from %s passes after it was checked", u.v4)
	}
	if err := eventually(3*time.Second, func() error { return dialTCP(checked.NS, checked.v4, dst, time.Second) }); err != nil {
		t.Fatalf("the checked pod's own traffic: %v", err)
	}
}
