package vlan

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// VRRP group of the tests: VRID vrrpVRID holding vrrpVIP on VLAN 100,
// granted to vlanNS (the grant's vrrp).
const vrrpVRID = 7

var vrrpVIP = netip.MustParseAddr("192.0.2.50")

// vrrpMAC is the group's virtual MAC (RFC 5798 7.3).
var vrrpMAC = net.HardwareAddr{0x00, 0x00, 0x5e, 0x00, 0x01, vrrpVRID}

// keepalivedConf is the configuration of a VRRP speaker on podIf with
// priority: VRRPv3 with 0.5 s adverts (the backup takes over 1.5 s and
// the skew after the master's last), the VIP on a macvlan interface with
// the virtual MAC (use_vmac), as RFC 5798 has a virtual router send.
func keepalivedConf(name string, priority int) string {
	return fmt.Sprintf(`global_defs {
  router_id %s
  vrrp_version 3
}
vrrp_instance VI_%d {
  state BACKUP
  interface %s
  virtual_router_id %d
  priority %d
  advert_int 0.5
  use_vmac vrrp.%d
  virtual_ipaddress {
    %s/24
  }
}
`, name, vrrpVRID, podIf, vrrpVRID, priority, vrrpVRID, vrrpVIP)
}

// createVRRPPod creates a forwarding pod on VLAN 100 holding addr and the
// group's VIP that runs keepalived (cluster.VRRPImage) with priority.
func createVRRPPod(t *testing.T, name string, n *cluster.Node, addr netip.Addr, priority int) {
	t.Helper()
	ann := vlanPod(100, addr)
	ann["podwire.io/forwarding"] = "true"
	ann["podwire.io/vrrp"] = fmt.Sprintf("%d=%s", vrrpVRID, vrrpVIP)
	script := "mkdir -p /etc/keepalived /tmp && cat >/etc/keepalived/keepalived.conf <<'EOF'\n" + keepalivedConf(name, priority) +
		"EOF\nexec keepalived --dont-fork --log-console --vrrp --pid=/tmp/keepalived.pid --vrrp_pid=/tmp/vrrp.pid -f /etc/keepalived/keepalived.conf\n"
	createPodWith(t, vlanNS, name, n, ann, map[string]any{
		"name": "keepalived", "image": cluster.VRRPImageRef, "imagePullPolicy": "Never",
		"command": []string{"/bin/sh", "-c", script},
		// keepalived makes the macvlan and sets its sysctls (arp_ignore,
		// arp_filter) in the pod's netns.
		"securityContext": map[string]any{"privileged": true},
	})
}

// vipResponder answers every datagram to vrrpVIP:echoPort in the netns at
// nsPath with name, from a socket bound to the VIP whether or not the pod
// holds it now (IP_FREEBIND): the client learns who is master.
func vipResponder(t *testing.T, nsPath, name string) {
	t.Helper()
	var conn net.PacketConn
	if err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1) }); err != nil {
				return err
			}
			return serr
		}}
		var err error
		conn, err = lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(vrrpVIP, echoPort).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			conn.WriteTo([]byte(name), from)
		}
	}()
}

// whoHoldsVIP asks the VIP once from the client and returns the answering
// pod's name ("" when none answered within 200 ms).
func whoHoldsVIP() string {
	var conn *net.UDPConn
	if err := ns.WithNetNSPath(clientNS.Path(), func(ns.NetNS) error {
		var err error
		conn, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(vrrpVIP, echoPort)))
		return err
	}); err != nil {
		return ""
	}
	defer conn.Close()
	conn.Write([]byte("who"))
	conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// TestVRRPFailover: two router pods on the two nodes run keepalived for
// one VRRP group (podwire.io/vrrp, granted by the grant's vrrp). The
// client reaches the VIP at the master (priority 200, node 1). A forwarding
// pod without the group, on the master's node, that sends from the
// virtual MAC never reaches the client (its own MAC does: the control),
// and the VIP stays with the master. The master's pod is deleted: the
// client's traffic moves to the backup on node 2 within 3 s of the last
// answer from the master.
func TestVRRPFailover(t *testing.T) {
	suite.Need(t)
	ensureNamespace(t, vlanNS)
	thiefIP := netip.MustParseAddr("192.0.2.53")
	createVRRPPod(t, "vrrp-1", c.Nodes[0], netip.MustParseAddr("192.0.2.51"), 200)
	createVRRPPod(t, "vrrp-2", c.Nodes[1], netip.MustParseAddr("192.0.2.52"), 100)
	createPod(t, vlanNS, "vrrp-thief", c.Nodes[0], map[string]string{
		"podwire.io/vlan": "100", "podwire.io/vlan-ips": netip.PrefixFrom(thiefIP, 24).String(), "podwire.io/forwarding": "true"})
	master := readyPod(t, vlanNS, "vrrp-1", c.Nodes[0])
	backup := readyPod(t, vlanNS, "vrrp-2", c.Nodes[1])
	thief := readyPod(t, vlanNS, "vrrp-thief", c.Nodes[0])
	vipResponder(t, master.netns, master.name)
	vipResponder(t, backup.netns, backup.name)
	waitHolder(t, master.name, time.Minute)

	const sinkPort = echoPort + 2
	sink, err := packets.NewSink(clientNS.Path(), sinkPort)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	to := netip.AddrPortFrom(clientIP, sinkPort)
	packets.EchoServer(t, clientNS.Path(), netip.AddrPortFrom(clientIP, echoPort))
	reaches(t, "the thief to the client (neighbours resolved)", thief.netns, clientIP)
	if err := packets.SendFrom(thief.netns, thiefIP, to, "own-mac", 5); err != nil {
		t.Fatal(err)
	}
	if !sink.WaitGot(thiefIP, "own-mac", 5*time.Second) {
		t.Fatal("the client did not get what the pod without the group sent with its own MAC: the drop below would prove nothing")
	}
	setMAC(t, thief.netns, vrrpMAC)
	for _, src := range []netip.Addr{thiefIP, vrrpVIP} {
		if err := packets.SendFrom(thief.netns, src, to, "virtual-mac", 5); err != nil {
			t.Fatal(err)
		}
	}
	if got := sink.From("virtual-mac"); len(got) > 0 || sink.WaitGot(thiefIP, "virtual-mac", 2*time.Second) {
		t.Errorf("the client got what a pod without the group sent from the virtual MAC %s: from %v", vrrpMAC, sink.From("virtual-mac"))
	}
	if h := whoHoldsVIP(); h != master.name {
		t.Errorf("after the thief's frames the VIP answers from %q, want %s", h, master.name)
	}

	// Failover: the master's pod goes.
	var lastMaster time.Time
	deleted := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := api(ctx, "DELETE", "/api/v1/namespaces/"+vlanNS+"/pods/"+master.name, nil); err != nil {
		t.Fatal(err)
	}
	for {
		switch h := whoHoldsVIP(); h {
		case master.name:
			lastMaster = time.Now()
		case backup.name:
			if lastMaster.IsZero() {
				lastMaster = deleted
			}
			gap := time.Since(lastMaster)
			t.Logf("the backup %s on %s answers %.2fs after the master's last answer (%.2fs after the DELETE)",
				backup.name, c.Nodes[1].Name, gap.Seconds(), time.Since(deleted).Seconds())
			if gap > 3*time.Second {
				t.Errorf("the client's traffic moved to the backup %.2fs after the master's last answer, want within 3 s", gap.Seconds())
			}
			if !t.Failed() {
				t.Logf("PASS VRRP: keepalived master on %s, backup on %s; failover in %.2fs; a pod without the group sending from %s dropped",
					c.Nodes[0].Name, c.Nodes[1].Name, gap.Seconds(), vrrpMAC)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the backup %s never answered for the VIP within a minute of the master's deletion", backup.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitHolder waits until the VIP answers from the pod name.
func waitHolder(t *testing.T, name string, d time.Duration) {
	t.Helper()
	start := time.Now()
	var h string
	for time.Since(start) < d {
		if h = whoHoldsVIP(); h == name {
			t.Logf("the VIP %s answers from %s after %.1fs", vrrpVIP, name, time.Since(start).Seconds())
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _ := c.Kubectl(context.Background(), "", "-n", vlanNS, "logs", name, "--tail=30")
	t.Fatalf("the VIP %s does not answer from %s within %v (last: %q); its log:\n%s", vrrpVIP, name, d, h, strings.TrimSpace(out))
}
