package multinode

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/k8s/cluster"
)

// TestClaimsAcrossNodes: a route is claimed for the whole cluster, not for
// the node of its pod (the ClaimPools the agents keep).
//   - The admin's router in forwardingNS on node 1 holds routedNet. The
//     tenant's forwarding pods on node 2 asking for a part of it, or for
//     all of it, are refused: the PodwireRefused Event, read by the
//     tenant, and the runtime's error name the gate and the holder with
//     its node, and node 2 holds nothing of them. Without the cluster-wide
//     claim both are wired (node 2's records hold no route): the control
//     is the integration suite's TestRoutesNodeScope, two nodes with
//     claimScope "node" each routing the same prefix to its own router.
//   - The outside network, routing routedNet to node 1, keeps reaching a
//     host behind the router.
//   - Deleting the router frees the prefix for node 2.
//   - Two pods asking for the same prefix at once on the two nodes,
//     several rounds: exactly one is Ready, the other refused naming it.
func TestClaimsAcrossNodes(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	tn := newTenant(t, tenantNS, tenantRouterNS)
	kubectl(t, "", "create", "namespace", forwardingNS)
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", forwardingNS, "--wait=true", "--timeout=90s") })
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if err := c.WaitServiceAccount(ctx, forwardingNS); err != nil {
		t.Fatal(err)
	}
	if err := createPod(ctx, forwardingNS, "router", n1, nil, map[string]string{
		"podwire.io/forwarding": "true", "podwire.io/routes": routedNet.String(),
	}); err != nil {
		t.Fatal(err)
	}
	router, err := waitPod(ctx, forwardingNS, "router", n1)
	if err != nil {
		t.Fatal(err)
	}
	hostIP := routedNet.Addr().Next().Next()
	behind, release, err := cluster.NetworkBehind(router.netns,
		[]netip.Prefix{netip.PrefixFrom(routedNet.Addr().Next(), 24)}, []netip.Prefix{netip.PrefixFrom(hostIP, 24)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	const port = 7405
	udpEchoServer(t, behind, port)
	outsideRoutes(t, []netip.Prefix{routedNet}, n1)
	reach := func(when string) {
		t.Helper()
		if err := cnitest.Eventually(30*time.Second, func() error {
			_, err := exchangeFrom(c.OutsideNetNS, netip.AddrPortFrom(hostIP, port))
			return err
		}); err != nil {
			t.Fatalf("%s: the outside does not reach %s behind the router on %s: %v", when, hostIP, n1.Name, err)
		}
	}
	reach("before the tenant's pods")

	holder := fmt.Sprintf("%s/router (node %s)", forwardingNS, n1.Name)
	for _, tc := range []struct{ name, prefix string }{
		{"claim-part", tenantRoute.String()},
		{"claim-same", routedNet.String()},
	} {
		msg := refusedPod(t, tn, tenantRouterNS, tc.name, n2,
			map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": tc.prefix},
			"gate route-overlap", "podwire.io/routes", tc.prefix, "no overlapping routes", routedNet.String(), holder)
		t.Logf("refused on %s: %s", n2.Name, msg)
		if v := nodeAnnotation(t, n2.Name, "podwire.io/routes"); v != "" {
			t.Errorf("%s publishes podwire.io/routes %q for a refused pod", n2.Name, v)
		}
	}
	reach("after the refusals")

	// The holder goes: the prefix is free on the other node.
	if err := deletePod(ctx, forwardingNS, "router"); err != nil {
		t.Fatal(err)
	}
	waitSandboxGone(t, ctx, router)
	tn.createPod(t, tenantRouterNS, "claim-freed", n2, map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": tenantRoute.String()})
	if _, err := waitPod(ctx, tenantRouterNS, "claim-freed", n2); err != nil {
		t.Fatalf("the prefix %s of the deleted router, asked on %s: %v", tenantRoute, n2.Name, err)
	}
	tn.deletePod(t, tenantRouterNS, "claim-freed")

	// Racing ADDs on the two nodes.
	for round := range 3 {
		raceOnce(t, ctx, tn, round, n1, n2)
	}
}

// raceOnce creates two forwarding pods of tenantRouterNS at once, one on
// each node, asking for tenantRoute, and checks that exactly one is Ready
// and the other refused naming it; then deletes both and waits until
// their sandboxes are gone (the claim released).
func raceOnce(t *testing.T, ctx context.Context, tn *tenant, round int, nodes ...*cluster.Node) {
	t.Helper()
	ann := map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": tenantRoute.String()}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = fmt.Sprintf("race-%d-%s", round, n.Name)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Go(func() { errs[i] = createPod(ctx, tenantRouterNS, names[i], n, nil, ann) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, name := range names {
			tn.deletePod(t, tenantRouterNS, name)
		}
	})
	uids := make([]string, len(nodes))
	for i, name := range names {
		uids[i] = strings.TrimSpace(kubectl(t, "", "get", "pod", "-n", tenantRouterNS, name, "-o", "jsonpath={.metadata.uid}"))
	}
	// The winner is Ready within a minute; the loser stays refused.
	var ready []string
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var mu sync.Mutex
	for i, n := range nodes {
		wg.Go(func() {
			if _, err := waitPod(wctx, tenantRouterNS, names[i], n); err == nil {
				mu.Lock()
				ready = append(ready, names[i])
				mu.Unlock()
				cancel() // one is enough: the other is then the loser
			}
		})
	}
	wg.Wait()
	if len(ready) != 1 {
		t.Fatalf("round %d: Ready %v of %v: want exactly one", round, ready, names)
	}
	winner := slices.Index(names, ready[0])
	loser := 1 - winner
	msg, _ := tn.refusedEvents(t, tenantRouterNS, names[loser], uids[loser])
	want := fmt.Sprintf("%s/%s (node %s)", tenantRouterNS, names[winner], nodes[winner].Name)
	if !strings.Contains(msg, want) || !strings.Contains(msg, "route-overlap") {
		t.Errorf("round %d: the refusal of %s does not name the gate and the winner %s: %s", round, names[loser], want, msg)
	}
	// Still not Ready a few seconds on: the kubelet's retries are refused too.
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if _, err := waitPod(sctx, tenantRouterNS, names[loser], nodes[loser]); err == nil {
		t.Errorf("round %d: both %s and %s are Ready with %s", round, names[winner], names[loser], tenantRoute)
	}
	t.Logf("round %d: %s on %s won, %s on %s refused: %s", round, names[winner], nodes[winner].Name, names[loser], nodes[loser].Name, firstLine(msg))
	for _, name := range names {
		tn.deletePod(t, tenantRouterNS, name)
	}
	for i, n := range nodes {
		waitSandboxGone(t, ctx, &pod{namespace: tenantRouterNS, name: names[i], node: n, uid: uids[i]})
	}
}
