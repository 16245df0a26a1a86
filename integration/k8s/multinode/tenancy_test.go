package multinode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// The tenancy gates of the suite's values (podwireValues) that
// TestHostileTenant attempts to pass.
const (
	// tenantNS is the tenant's own namespace; tenantRouterNS a second one
	// of the tenant's that the admin lets run forwarding pods.
	tenantNS, tenantRouterNS = "tenant-a", "tenant-a-router"
	// otherTeamNS is granted otherVLAN, which tenantNS is not.
	otherTeamNS = "team-b"
	otherVLAN   = 100
	// tenantVLAN is granted to tenantNS with addresses from
	// tenantVLANSubnet, minus its gateway tenantVLANGateway.
	tenantVLAN = 200
	// forwardingLabel selects forwarding namespaces
	// (forwarding.namespaceSelector); labelledNS is one the admin labels,
	// whose name matches no forwarding.namespaces glob.
	forwardingLabel = "podwire.io/forwarding"
	labelledNS      = "labelled-fwd"
)

var (
	tenantVLANSubnet  = netip.MustParsePrefix("10.100.200.0/24")
	tenantVLANGateway = netip.MustParseAddr("10.100.200.1")
	// egressBounds is egress.allowedCIDRs: every egress IP of the suite
	// (egressIPs, TestPerNodeEgress's) lies inside; rogueEgress and
	// rogueEgress6 lie on the uplinks' segment but outside.
	egressBounds              = []netip.Prefix{netip.MustParsePrefix("10.99.0.0/26"), netip.MustParsePrefix("fd99::/120")}
	rogueEgress, rogueEgress6 = netip.MustParseAddr("10.99.0.66"), netip.MustParseAddr("fd99::1:66")
	// tenantRoute is the tenant's route: a part of routedNet, which the
	// admin's router holds.
	tenantRoute = netip.MustParsePrefix("198.51.100.128/25")
)

// tenancyValues are the tenancy gates in the suite's podwire values:
// VLAN grants, tenantRouterNS among the forwarding namespaces, namespaces
// labelled forwardingLabel=true forwarding too, and the bounds of the Node
// egress annotation.
func tenancyValues(config map[string]any) {
	config["vlanGrants"] = []map[string]any{
		{"vlans": fmt.Sprint(otherVLAN), "namespaces": []string{otherTeamNS}},
		{"vlans": fmt.Sprint(tenantVLAN), "namespaces": []string{tenantNS},
			"subnets": []string{tenantVLANSubnet.String()}, "exclude": []string{netip.PrefixFrom(tenantVLANGateway, 32).String()}},
	}
	fwd := config["forwarding"].(map[string]any)
	fwd["namespaces"] = append(fwd["namespaces"].([]string), tenantRouterNS)
	fwd["namespaceSelector"] = map[string]any{"matchLabels": map[string]string{forwardingLabel: "true"}}
	var bounds []string
	for _, p := range egressBounds {
		bounds = append(bounds, p.String())
	}
	config["egress"].(map[string]any)["allowedCIDRs"] = bounds
}

// TestHostileTenant is a hostile tenant: a ServiceAccount with
// namespace-scoped RBAC (newTenant), acting through kubectl with its token
// alone, tries to get more than the admin granted. Each pod it makes for
// that is refused by podwire's gate before anything of the node is
// touched, the refusal is an Event on the pod that the tenant reads and
// that names the gate (its config key), and once the tenant deletes the
// pod nothing of it is left on the node (refusedPod). Each case fails when
// its gate is off: the pod would be wired (or fail later, for another
// reason and with no PodwireRefused Event naming the key), the route
// installed, the egress IP used.
func TestHostileTenant(t *testing.T) {
	needCluster(t)
	tn := newTenant(t, tenantNS, tenantRouterNS)
	n := c.Nodes[1]

	// The grant of otherVLAN names otherTeamNS only.
	t.Run("VLANNotGranted", func(t *testing.T) {
		msg := refusedPod(t, tn, tenantNS, "vlan-not-granted", n, map[string]string{"podwire.io/vlan": fmt.Sprint(otherVLAN)},
			"gate allowed-vlans", "podwire.io/vlan", "vlanGrants", fmt.Sprintf("VLAN %d is not granted to namespace %q", otherVLAN, tenantNS))
		t.Logf("refused: %s", msg)
	})

	// tenantVLAN is the tenant's, but its gateway is excluded: the
	// address is refused at the gate. A VLAN pod that passes the gates
	// cannot be wired on this kernel (no 8021q), which is why the node
	// must show that nothing of the VLAN was made: no bridge.
	t.Run("GatewayAddress", func(t *testing.T) {
		gw := netip.PrefixFrom(tenantVLANGateway, tenantVLANSubnet.Bits()).String()
		msg := refusedPod(t, tn, tenantNS, "vlan-gateway", n,
			map[string]string{"podwire.io/vlan": fmt.Sprint(tenantVLAN), "podwire.io/vlan-ips": gw},
			"gate vlan-subnets", "podwire.io/vlan-ips", "vlanGrants", tenantVLANGateway.String(), "excluding "+tenantVLANGateway.String()+"/32")
		t.Logf("refused: %s", msg)
	})

	// The tenant cannot make a namespace, so none named like a forwarding
	// one; its own namespace is not one, and the pod that asks to forward
	// there is refused by the namespace gate.
	t.Run("ForwardingNamespaceByName", func(t *testing.T) {
		tn.forbidden(t, "create a namespace named like a forwarding one", "create", "namespace", forwardingNS+"-tenant")
		msg := refusedPod(t, tn, tenantNS, "fwd-namespace", n, map[string]string{"podwire.io/forwarding": "true"},
			"gate forwarding-namespace", "podwire.io/forwarding", "forwarding.namespaces", fmt.Sprintf("namespace %q", tenantNS))
		t.Logf("refused: %s", msg)
	})

	// forwarding.namespaceSelector admits namespaces by a label that only
	// whoever may update Namespaces sets: the tenant cannot label its own
	// namespace, so its forwarding pod stays refused, the Event naming the
	// selector; a namespace the admin labelled (its name matches no glob)
	// runs a forwarding pod, so the selector is what admits.
	t.Run("ForwardingNamespaceSelector", func(t *testing.T) {
		label := forwardingLabel + "=true"
		tn.forbidden(t, "label its namespace for forwarding", "label", "namespace", tenantNS, label)
		msg := refusedPod(t, tn, tenantNS, "fwd-selector", n, map[string]string{"podwire.io/forwarding": "true"},
			"gate forwarding-namespace", "podwire.io/forwarding", "forwarding.namespaceSelector", label)
		t.Logf("refused: %s", msg)

		kubectl(t, "", "create", "namespace", labelledNS)
		t.Cleanup(func() { kubectl(t, "", "delete", "namespace", labelledNS, "--wait=true", "--timeout=90s") })
		kubectl(t, "", "label", "namespace", labelledNS, label)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.WaitServiceAccount(ctx, labelledNS); err != nil {
			t.Fatal(err)
		}
		if err := createPod(ctx, labelledNS, "router", n, nil, map[string]string{"podwire.io/forwarding": "true"}); err != nil {
			t.Fatal(err)
		}
		if _, err := waitPod(ctx, labelledNS, "router", n); err != nil {
			t.Fatalf("forwarding pod in %s, labelled %s: %v", labelledNS, label, err)
		}
	})

	// The admin's router in forwardingNS holds routedNet; the tenant's
	// forwarding pod (tenantRouterNS is a forwarding namespace, and the
	// prefix lies inside forwarding.routablePrefixes) announces a part of
	// it, which would take over part of the router's return path.
	t.Run("RouteOverlap", func(t *testing.T) {
		kubectl(t, "", "create", "namespace", forwardingNS)
		t.Cleanup(func() { kubectl(t, "", "delete", "namespace", forwardingNS, "--wait=true", "--timeout=90s") })
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.WaitServiceAccount(ctx, forwardingNS); err != nil {
			t.Fatal(err)
		}
		if err := createPod(ctx, forwardingNS, "router", n, nil, map[string]string{
			"podwire.io/forwarding": "true", "podwire.io/routes": routedNet.String(),
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := waitPod(ctx, forwardingNS, "router", n); err != nil {
			t.Fatal(err)
		}
		if err := cnitest.Eventually(30*time.Second, func() error {
			if v := nodeAnnotation(t, n.Name, "podwire.io/routes"); v != routedNet.String() {
				return fmt.Errorf("%s publishes podwire.io/routes %q, want the router's %s", n.Name, v, routedNet)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		msg := refusedPod(t, tn, tenantRouterNS, "route-overlap", n,
			map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": tenantRoute.String()},
			"gate route-overlap", "podwire.io/routes", "no overlapping routes", tenantRoute.String(), routedNet.String(),
			tenantRouterNS+"/route-overlap", forwardingNS+"/router")
		t.Logf("refused: %s", msg)
		out, err := n.Command(context.Background(), "ip", "route", "show", "exact", tenantRoute.String()).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("%s routes the refused prefix %s: %v\n%s", n.Name, tenantRoute, err, out)
		}
		if v := nodeAnnotation(t, n.Name, "podwire.io/routes"); v != routedNet.String() {
			t.Errorf("%s publishes podwire.io/routes %q, want the router's %s alone", n.Name, v, routedNet)
		}
	})

	t.Run("EgressOutsideBounds", func(t *testing.T) { egressOutsideBounds(t, tn, n, 1) })
}

// refusedPod creates, as tn, the pod namespace/name on node n with
// annotations, and checks that podwire refused it at a gate: its
// PodwireRefused Event, read by tn, says every string of want (the
// refusal's reason, the annotation, the config key, the values), and the
// kubelet's FailedCreatePodSandBox Events carry that refusal as the
// runtime's CNI error; while the runtime retries it, the pod has no attachment record
// and the node no VLAN bridge. Then tn deletes the pod, and the node must hold nothing of it: no
// record, no host veth made since, no element of podwire's tables naming
// it. It returns the Event's message.
func refusedPod(t *testing.T, tn *tenant, namespace, name string, n *cluster.Node, annotations map[string]string, want ...string) string {
	t.Helper()
	before := hostVeths(t, n)
	uid := tn.createPod(t, namespace, name, n, annotations)
	t.Cleanup(func() { tn.deletePod(t, namespace, name) })
	msg, sandbox := tn.refusedEvents(t, namespace, name, uid)
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("the PodwireRefused Event of %s/%s does not say %q: %s", namespace, name, w, msg)
		}
	}
	// The runtime's error is the gate's refusal: the ADD stopped there,
	// before it wired anything (with the gate off, the VLAN cases fail
	// later on this kernel: "failed to create bridge").
	// The refusal proper: "annotation KEY "VALUE" refused by GATE: ..."
	// (the agent's message may wrap it).
	refusal := msg[max(strings.Index(msg, "annotation "), 0):]
	for _, e := range sandbox {
		if !strings.Contains(e, refusal) {
			t.Errorf("the runtime's error for %s/%s is not the gate's refusal %q: %s", namespace, name, refusal, e)
		}
	}
	if recs := recordsOf(t, n, uid); len(recs) > 0 {
		t.Errorf("%s holds records of the refused pod %s/%s: %v", n.Name, namespace, name, recs)
	}
	noVLANBridge(t, n)

	tn.deletePod(t, namespace, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitSandboxGone(t, ctx, &pod{namespace: namespace, name: name, node: n, uid: uid})
	if recs := recordsOf(t, n, uid); len(recs) > 0 {
		t.Errorf("%s still holds records of the deleted pod %s/%s: %v", n.Name, namespace, name, recs)
	}
	for _, v := range hostVeths(t, n) {
		if !slices.Contains(before, v) {
			t.Errorf("%s has a host veth %s made since %s/%s was created, and the pod is gone", n.Name, v, namespace, name)
		}
	}
	out, err := n.Command(ctx, "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: nft list ruleset: %v\n%s", n.Name, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, namespace+"/"+name) {
			t.Errorf("%s: the ruleset still names the deleted pod %s/%s: %s", n.Name, namespace, name, strings.TrimSpace(l))
		}
	}
	return msg
}

// hostVeths lists the veths of node n's netns (the host sides of its pods).
func hostVeths(t *testing.T, n *cluster.Node) []string {
	t.Helper()
	var names []string
	err := ns.WithNetNSPath(n.NetNS, func(ns.NetNS) error {
		links, err := netlinksafe.LinkList()
		for _, l := range links {
			if l.Type() == "veth" {
				names = append(names, l.Attrs().Name)
			}
		}
		return err
	})
	if err != nil {
		t.Fatalf("%s: links: %v", n.Name, err)
	}
	return names
}

// recordsOf lists the attachment records in node n's stateDir that name
// the pod with uid.
func recordsOf(t *testing.T, n *cluster.Node, uid string) []string {
	t.Helper()
	dir := n.Path("/run/podwire")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%s: %v", n.Name, err)
	}
	var recs []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || !strings.Contains(e.Name(), "_") {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && strings.Contains(string(b), uid) {
			recs = append(recs, e.Name())
		}
	}
	return recs
}

// noVLANBridge fails t when node n has podwire's VLAN bridge: no VLAN pod
// is ever wired in this suite, so one would have been made for a refused
// pod.
func noVLANBridge(t *testing.T, n *cluster.Node) {
	t.Helper()
	err := ns.WithNetNSPath(n.NetNS, func(ns.NetNS) error {
		_, err := netlinksafe.LinkByName("podwire0")
		return err
	})
	if lnf := (netlink.LinkNotFoundError{}); !errors.As(err, &lnf) {
		t.Errorf("%s: the VLAN bridge podwire0 exists (or cannot be read: %v): the kernel was touched", n.Name, err)
	}
}

// egressOutsideBounds: the tenant may not annotate its Node. The admin's
// annotation naming egress IPs outside egress.allowedCIDRs (assigned on the
// node i, n, so that SNAT to them would work) is never used: the tenant's
// pod, seen from the outside from n's in-bounds egress IPs before, leaves
// from the node's own address (flannel's masquerade) after, never from
// the annotated ones; and `podwire status` on n shows the refusal as an
// error naming the key.
func egressOutsideBounds(t *testing.T, tn *tenant, n *cluster.Node, i int) {
	tn.forbidden(t, "annotate its Node's egress IP", "annotate", "node", n.Name, "--overwrite", annEgressIP+"="+rogueEgress.String())

	v4, v6 := egressIPs(i)
	setEgress(t, n, v4, v6)
	const port = 7500
	packets.EchoServer(t, c.OutsideNetNS, netip.AddrPortFrom(serverIP, port))
	packets.EchoServer(t, c.OutsideNetNS, netip.AddrPortFrom(serverIP6, port))
	tn.createPod(t, tenantNS, "egress", n, nil)
	t.Cleanup(func() { tn.deletePod(t, tenantNS, "egress") })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := waitPod(ctx, tenantNS, "egress", n)
	if err != nil {
		t.Fatal(err)
	}
	for dst, want := range map[netip.Addr]netip.Addr{serverIP: v4, serverIP6: v6} {
		if got := sourceSeen(t, p, netip.AddrPortFrom(dst, port)); got != want {
			t.Fatalf("control: the tenant's pod reached %s from %s, want %s's annotated egress IP %s", dst, got, n.Name, want)
		}
	}
	t.Logf("control: inside egress.allowedCIDRs, the tenant's pod leaves from %s's annotated %s and %s", n.Name, v4, v6)

	// The rogue IPv6 address is deprecated (preferred lifetime 0): the
	// kernel never picks it as a source by itself (RFC 6724, rule 3), so
	// only a SNAT to it would show it to the outside.
	for _, a := range []*netlink.Addr{
		{IPNet: netipNet(netip.PrefixFrom(rogueEgress, cluster.LinkPrefix.Bits()))},
		{IPNet: netipNet(netip.PrefixFrom(rogueEgress6, cluster.LinkPrefix6.Bits())), Flags: unix.IFA_F_NODAD, ValidLft: 3600},
	} {
		if err := ns.WithNetNSPath(n.NetNS, func(ns.NetNS) error {
			l, err := netlinksafe.LinkByName("eth0")
			if err != nil {
				return err
			}
			return netlink.AddrAdd(l, a)
		}); err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		t.Cleanup(func() {
			_ = ns.WithNetNSPath(n.NetNS, func(ns.NetNS) error {
				l, err := netlinksafe.LinkByName("eth0")
				if err != nil {
					return err
				}
				return netlink.AddrDel(l, a)
			})
		})
	}
	annotateEgress(t, n, rogueEgress.String()+","+rogueEgress6.String())

	// IPv4 leaves from the node's own address once the egress table
	// follows the annotation (the agent's repair, within 10 s); never from
	// the rogue one.
	var got netip.Addr
	if err := cnitest.Eventually(45*time.Second, func() error {
		if got = sourceSeen(t, p, netip.AddrPortFrom(serverIP, port)); got == rogueEgress {
			t.Fatalf("the tenant's pod reached %s from %s, outside egress.allowedCIDRs %v", serverIP, got, egressBounds)
		}
		if got != n.IP {
			return fmt.Errorf("it leaves from %s", got)
		}
		return nil
	}); err != nil {
		t.Fatalf("45 s after the annotation %s, the tenant's pod does not leave from %s's own address %s: %v", rogueEgress, n.Name, n.IP, err)
	}
	for range 5 {
		for _, tc := range []struct{ dst, rogue netip.Addr }{{serverIP, rogueEgress}, {serverIP6, rogueEgress6}} {
			if got := sourceSeen(t, p, netip.AddrPortFrom(tc.dst, port)); got == tc.rogue {
				t.Fatalf("the tenant's pod reached %s from %s, outside egress.allowedCIDRs %v", tc.dst, got, egressBounds)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("with %s annotated %s,%s: the tenant's pod leaves from %s, never from the annotated addresses", n.Name, rogueEgress, rogueEgress6, got)

	st, out, err := cnitest.RunStatus(n.Command(ctx, "/opt/cni/bin/podwire", "status", "--conf-dir", "/etc/cni/net.d", "--json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rogue := range []netip.Addr{rogueEgress, rogueEgress6} {
		if !slices.ContainsFunc(st.Warnings, func(w string) bool {
			return strings.HasPrefix(w, "error: ") && strings.Contains(w, rogue.String()) && strings.Contains(w, "egress.allowedCIDRs")
		}) {
			t.Errorf("podwire status on %s does not show the refused egress IP %s as an error:\n%s", n.Name, rogue, out)
		}
	}
	// The agent reports the refusal as its error and a Warning Event on
	// the Node (PodwireEgressError), within a tick or two.
	var onNode []string
	if err := cnitest.Eventually(30*time.Second, func() error {
		events := kubectl(t, "", "get", "events", "-n", "default", "--field-selector",
			"involvedObject.kind=Node,involvedObject.name="+n.Name+",reason=PodwireEgressError,type=Warning",
			"-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
		onNode = onNode[:0]
		for _, l := range strings.Split(events, "\n") {
			if strings.Contains(l, rogueEgress.String()) && strings.Contains(l, "egress.allowedCIDRs") {
				onNode = append(onNode, l)
			}
		}
		if len(onNode) == 0 {
			return fmt.Errorf("no PodwireEgressError Warning Event on %s naming %s: %q", n.Name, rogueEgress, events)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("podwire status on %s shows the refusal as an error; Node Events: %q", n.Name, onNode)
}
