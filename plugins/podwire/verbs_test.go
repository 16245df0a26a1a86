package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nft/nftfake"
	"github.com/podwire/podwire/pkg/ruleset"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
)

// The verbs run in-process against fakes (nftfake for nftables, fakeLinks,
// fakeSysctls) and a temporary stateDir, as containernetworking/plugins
// tests cmdAdd: no root, no netns. What crosses a network is proven by the
// root suites in integration/.

// testNode is one fake node: the backends and the stateDir.
type testNode struct {
	t       *testing.T
	p       *plugin
	nft     *nftfake.Conn
	conn    nft.Conn // what dialNFT returns: nft, or a flaky wrapper
	links   *fakeLinks
	vlan    *fakeVLAN
	sysctls *fakeSysctls
	dir     string
	log     string
}

// testPod is one pod as the runtime describes it to podwire.
type testPod struct {
	id, ns, name, hostIf, ip4 string
	ann                       map[string]string
}

func newTestNode(t *testing.T) *testNode {
	tmp := t.TempDir()
	n := &testNode{t: t, nft: &nftfake.Conn{}, dir: filepath.Join(tmp, "state"), log: filepath.Join(tmp, "podwire.log")}
	n.conn = n.nft
	n.links = newFakeLinks()
	n.vlan = &fakeVLAN{removedVLANs: map[string][]uint16{}}
	n.sysctls = newFakeSysctls()
	n.p = &plugin{
		dialNFT: func() (nft.Conn, error) { return n.conn, nil },
		node:    n.links,
		routes:  n.links,
		vlan:    n.vlan,
		neigh:   n.links,
		sysctls: n.sysctls,
	}
	return n
}

// wire makes the host veth of pod exist on the fake node, with rp_filter 2.
func (n *testNode) wire(p testPod) {
	n.links.hostIfs[p.hostIf] = true
	n.sysctls.node["net/ipv4/conf/"+p.hostIf+"/rp_filter"] = "2"
}

// conf is the podwire entry as a runtime sends it: ptp's prevResult (a host
// veth and the pod's eth0) unless prev is false, the pod's annotations
// unless nil, and the extra top-level keys. Claims are checked on the node
// (claimScope "node": no agent here) unless extra says otherwise.
func (n *testNode) conf(version string, p testPod, prev bool, extra map[string]any) []byte {
	c := map[string]any{
		"cniVersion": version, "name": "podnet", "type": "podwire", "stateDir": n.dir, "logFile": n.log,
		"forwarding": map[string]any{"namespaces": []string{"nf-*"}, "routablePrefixes": []string{"198.51.100.0/24"}},
		"egress":     map[string]any{"ips": []string{"203.0.113.10"}, "exceptCIDRs": []string{"10.199.0.0/16"}},
		"claimScope": "node",
	}
	if prev {
		c["prevResult"] = map[string]any{
			"cniVersion": version,
			"interfaces": []map[string]any{{"name": p.hostIf}, {"name": "eth0", "sandbox": "/var/run/netns/" + p.id}},
			"ips":        []map[string]any{{"address": p.ip4 + "/24", "interface": 1, "gateway": "10.199.0.1"}},
		}
	}
	if p.ann != nil {
		c["runtimeConfig"] = map[string]any{"io.kubernetes.cri.pod-annotations": p.ann}
	}
	for k, v := range extra {
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

func (n *testNode) args(p testPod, netns bool, stdin []byte) *skel.CmdArgs {
	a := &skel.CmdArgs{ContainerID: p.id, IfName: "eth0", StdinData: stdin,
		Args: fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s", p.ns, p.name)}
	if netns {
		a.Netns = "/var/run/netns/" + p.id
	}
	return a
}

func (n *testNode) add(version string, p testPod) (*current.Result, error) {
	args := n.args(p, true, n.conf(version, p, true, nil))
	r, _, err := testutils.CmdAddWithArgs(args, func() error { return n.p.cmdAdd(args) })
	if err != nil {
		return nil, err
	}
	return current.NewResultFromResult(r)
}

func (n *testNode) check(version string, p testPod) error {
	args := n.args(p, true, n.conf(version, p, true, nil))
	return testutils.CmdCheckWithArgs(args, func() error { return n.p.cmdCheck(args) })
}

func (n *testNode) del(version string, p testPod, netns, prev bool) error {
	args := n.args(p, netns, n.conf(version, p, prev, nil))
	return testutils.CmdDelWithArgs(args, func() error { return n.p.cmdDel(args) })
}

func (n *testNode) record(p testPod) *state.Record {
	n.t.Helper()
	r, err := state.New(n.dir).Get(p.id, "eth0")
	if err != nil {
		n.t.Fatal(err)
	}
	return r
}

// podElements are the set elements pod's record asks for under conf.
func (n *testNode) podElements(rec *state.Record) nft.Elements {
	n.t.Helper()
	conf, err := config.Parse(n.conf("1.0.0", testPod{}, false, nil))
	if err != nil {
		n.t.Fatal(err)
	}
	return ruleset.Elements(conf, rec)
}

func count(e nft.Elements) int {
	c := 0
	for _, sets := range e {
		for _, els := range sets {
			c += len(els)
		}
	}
	return c
}

// assertGone fails unless nothing of the attachment is left: no record (nor
// temporary record file), none of its elements, no route, its host
// rp_filter as before, and the node lock free.
func (n *testNode) assertGone(what string, p testPod, elems nft.Elements) {
	n.t.Helper()
	if r := n.record(p); r != nil {
		n.t.Errorf("%s: record left: %+v", what, r)
	}
	if left, _ := filepath.Glob(filepath.Join(n.dir, "*"+p.id+"*")); len(left) > 0 {
		n.t.Errorf("%s: files left: %v", what, left)
	}
	if got := present(n.nft, elems); count(got) > 0 {
		n.t.Errorf("%s: elements left: %v", what, got)
	}
	if len(n.links.routes) > 0 {
		n.t.Errorf("%s: routes left: %v", what, n.links.routes)
	}
	if v := n.sysctls.node["net/ipv4/conf/"+p.hostIf+"/rp_filter"]; v != "2" {
		n.t.Errorf("%s: host rp_filter is %s, want 2 restored", what, v)
	}
	f, err := os.OpenFile(filepath.Join(n.dir, "node.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		n.t.Errorf("%s: node lock still held: %v", what, err)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

var (
	ordinary = testPod{id: "c-ordinary", ns: "default", name: "web", hostIf: "veth-ord", ip4: "10.199.0.5",
		ann: map[string]string{}}
	router = testPod{id: "c-router", ns: "nf-a", name: "router", hostIf: "veth-rtr", ip4: "10.199.0.6",
		ann: map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": "198.51.100.0/25"}}
)

// TestVerbsInProcess: ADD, CHECK, CHECK after tampering, the repair by the
// next ADD, DEL, a second DEL and a DEL without netns or prevResult, for
// every spec version that has CHECK.
func TestVerbsInProcess(t *testing.T) {
	for _, ver := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		t.Run(ver, func(t *testing.T) {
			n := newTestNode(t)
			n.wire(ordinary)
			n.wire(router)

			res, err := n.add(ver, ordinary)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if len(res.Interfaces) != 2 || res.Interfaces[0].Name != ordinary.hostIf || len(res.IPs) != 1 {
				t.Errorf("ADD result is not prevResult: %+v", res)
			}
			rec := n.record(ordinary)
			if rec == nil || !rec.Complete || rec.HostIfName != ordinary.hostIf || !rec.SourceCheck || !rec.Egress ||
				rec.PodRef() != "default/web" || len(rec.Addresses) != 1 || rec.Addresses[0].String() != ordinary.ip4 {
				t.Fatalf("record after ADD: %+v", rec)
			}
			want := n.podElements(rec)
			if count(want) == 0 || count(present(n.nft, want)) != count(want) {
				t.Fatalf("elements after ADD: have %v, want %v", present(n.nft, want), want)
			}
			if err := n.check(ver, ordinary); err != nil {
				t.Fatalf("CHECK after ADD: %v", err)
			}

			// Tampering: the source check's chain flushed behind our back.
			n.nft.FlushChain(sourcecheck.ID, sourcecheck.Table().Chains[0].Name)
			if err := n.check(ver, ordinary); err == nil || !strings.Contains(err.Error(), "not current") {
				t.Fatalf("CHECK after flushing the chain: %v, want the table not current", err)
			}
			if _, err := n.add(ver, router); err != nil {
				t.Fatalf("ADD of the forwarding pod: %v", err)
			}
			if err := n.check(ver, ordinary); err != nil {
				t.Fatalf("CHECK after the next ADD repaired: %v", err)
			}

			rrec := n.record(router)
			if rrec == nil || !rrec.Forwarding || rrec.SourceCheck || len(rrec.Routes) != 1 ||
				rrec.HostSysctls["net/ipv4/conf/veth-rtr/rp_filter"] != "2" {
				t.Fatalf("forwarding pod's record: %+v", rrec)
			}
			if n.sysctls.node["net/ipv4/conf/veth-rtr/rp_filter"] != "0" || !n.sysctls.podFwd["/var/run/netns/c-router"] {
				t.Errorf("forwarding pod's sysctls: node %v pod %v", n.sysctls.node, n.sysctls.podFwd)
			}
			if err := n.check(ver, router); err != nil {
				t.Fatalf("CHECK of the forwarding pod: %v", err)
			}
			delete(n.links.routes, "198.51.100.0/25 via 10.199.0.6 dev veth-rtr")
			if err := n.check(ver, router); err == nil {
				t.Fatal("CHECK passed with the pod's route deleted")
			}
			routerElems := n.podElements(rrec)

			if err := n.del(ver, router, true, true); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			n.assertGone("DEL", router, routerElems)
			if err := n.del(ver, router, false, false); err != nil {
				t.Fatalf("second DEL, without netns and prevResult: %v", err)
			}
			if err := n.del(ver, ordinary, false, false); err != nil {
				t.Fatalf("DEL without netns and prevResult: %v", err)
			}
			n.assertGone("DEL without netns", ordinary, want)
		})
	}
}

// TestAddRollback: an ADD that fails at any point after its record was
// written leaves nothing: no record, none of its elements, no route, the
// host rp_filter restored, the node lock free.
func TestAddRollback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  func(n *testNode)
		cause string // the injected failure, which ADD's error must carry
	}{
		{"pod sysctls", func(n *testNode) { n.sysctls.failPodOn = errors.New("fake: read-only /proc/sys") }, "read-only /proc/sys"},
		{"routes", func(n *testNode) { n.links.failAddRoutes = errors.New("fake: RTM_NEWROUTE refused") }, "RTM_NEWROUTE refused"},
		// Flush 1 lays down the tables, 2 adds the pod's elements.
		{"elements", func(n *testNode) { n.conn = &flakyConn{Conn: n.nft, failAt: 2} }, "flush refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			n.wire(router)
			tc.fail(n)
			_, err := n.add("1.0.0", router)
			if err == nil || !strings.Contains(err.Error(), tc.cause) {
				t.Fatalf("ADD: %v, want the failure injected at %s (%q)", err, tc.name, tc.cause)
			}
			rec := &state.Record{ContainerID: router.id, IfName: "eth0", HostIfName: router.hostIf}
			if err := json.Unmarshal([]byte(`{"addresses":["`+router.ip4+`"]}`), rec); err != nil {
				t.Fatal(err)
			}
			n.assertGone("rollback", router, n.podElements(rec))
		})
	}
}

// TestRepeatedAdd: a second ADD of the same attachment replaces the first
// (its route is not left twice or stranded).
func TestRepeatedAdd(t *testing.T) {
	n := newTestNode(t)
	n.wire(router)
	for i := range 2 {
		if _, err := n.add("1.0.0", router); err != nil {
			t.Fatalf("ADD %d: %v", i+1, err)
		}
	}
	if r := n.record(router); r == nil || r.HostSysctls["net/ipv4/conf/veth-rtr/rp_filter"] != "2" {
		t.Fatalf("record after the repeated ADD does not keep the rp_filter from before podwire: %+v", r)
	}
	if err := n.check("1.0.0", router); err != nil {
		t.Fatal(err)
	}
}

// TestGCInProcess: GC removes the attachment not in
// cni.dev/valid-attachments and keeps the valid one working; without the key
// it removes nothing.
func TestGCInProcess(t *testing.T) {
	n := newTestNode(t)
	n.wire(ordinary)
	n.wire(router)
	for _, p := range []testPod{ordinary, router} {
		if _, err := n.add("1.1.0", p); err != nil {
			t.Fatalf("ADD %s: %v", p.name, err)
		}
	}
	routerElems := n.podElements(n.record(router))
	gc := func(extra map[string]any) error {
		args := &skel.CmdArgs{StdinData: n.conf("1.1.0", testPod{}, false, extra)}
		return n.p.cmdGC(args)
	}
	if err := gc(nil); err != nil {
		t.Fatalf("GC without the key: %v", err)
	}
	if n.record(router) == nil || n.record(ordinary) == nil {
		t.Fatal("GC without cni.dev/valid-attachments removed an attachment")
	}
	valid := []map[string]string{{"containerID": ordinary.id, "ifname": "eth0"}}
	if err := gc(map[string]any{"cni.dev/valid-attachments": valid}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	n.assertGone("GC", router, routerElems)
	if err := n.check("1.1.0", ordinary); err != nil {
		t.Fatalf("CHECK of the valid attachment after GC: %v", err)
	}
}

// TestStatusInProcess: a missing VLAN uplink is a warning, logged once per
// change, and STATUS succeeds; an unusable stateDir is error 50.
func TestStatusInProcess(t *testing.T) {
	n := newTestNode(t)
	status := func(extra map[string]any) error {
		args := &skel.CmdArgs{StdinData: n.conf("1.1.0", testPod{}, false, extra)}
		return testutils.CmdStatus(func() error { return n.p.cmdStatus(args) })
	}
	uplink := map[string]any{"uplink": "nope0"}
	for range 2 {
		if err := status(uplink); err != nil {
			t.Fatalf("STATUS with a missing uplink: %v, want success (a warning)", err)
		}
	}
	log, err := os.ReadFile(n.log)
	if err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(string(log), `uplink \"nope0\" missing`); c != 1 {
		t.Errorf("the uplink warning was logged %d times over two STATUS, want once:\n%s", c, log)
	}
	// The agent wrote that the primary is Cilium: STATUS warns (still 0).
	if err := os.WriteFile(filepath.Join(n.dir, config.PrimaryTypeName), []byte("cilium-cni"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := status(uplink); err != nil {
		t.Fatalf("STATUS with a Cilium primary: %v, want success (a warning)", err)
	}
	if log, _ := os.ReadFile(n.log); !strings.Contains(string(log), "primary is Cilium") {
		t.Errorf("STATUS did not warn about the Cilium primary:\n%s", log)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var e *types.Error
	if err := status(map[string]any{"stateDir": filepath.Join(file, "state")}); !errors.As(err, &e) || e.Code != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS with stateDir under a file: %v, want CNI error 50", err)
	}
}

// TestDelKeepsVLANsOfUnreadableRecords: the DEL of a VLAN pod removes from
// the uplink only the VLANs no other record holds. When another record
// cannot be read it may hold them, so DEL removes none (and still succeeds:
// the pod's port goes).
func TestDelKeepsVLANsOfUnreadableRecords(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt bool
		want    []uint16
	}{{"every record readable", false, []uint16{100}}, {"one record unreadable", true, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			p := testPod{id: "vlanpod", ns: "default", name: "v", hostIf: "veth-v", ip4: "10.199.0.7"}
			rec := &state.Record{ContainerID: p.id, IfName: "eth0", Complete: true, PodNamespace: p.ns, PodName: p.name,
				VLAN: &state.VLANAttachment{Bridge: "podwire0", HostVeth: "pw-v", PodIfName: "net1", PVID: 100, Uplink: "eth1"}}
			if err := state.New(n.dir).Put(rec); err != nil {
				t.Fatal(err)
			}
			if tc.corrupt {
				// Another VLAN pod's record, cut short by a full disk.
				if err := os.WriteFile(filepath.Join(n.dir, "other_eth0.json"), []byte(`{"containerID":"other","vlan":{"pvid":1`), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := n.del("1.0.0", p, false, false); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if got := n.vlan.removedVLANs["eth1"]; fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("VLANs removed from eth1: %v, want %v", got, tc.want)
			}
			if fmt.Sprint(n.vlan.deletedPorts) != "[pw-v]" {
				t.Errorf("ports deleted: %v, want [pw-v]", n.vlan.deletedPorts)
			}
		})
	}
}
