package agent

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/forwarding"
	"github.com/podwire/podwire/pkg/state"
)

// fakePools is a fake dynamic client whose ClaimPools behave as the
// apiserver's on a write: an update with a stale resourceVersion is a
// Conflict (the fake's tracker alone accepts any), and each write gives the
// object a new resourceVersion. The fake runs one action's reactors at a
// time, so the check and the write are one step.
func fakePools(t *testing.T) *dynamicfake.FakeDynamicClient {
	t.Helper()
	fc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{ClaimPoolResource: "ClaimPoolList"})
	var rv int
	fc.PrependReactor("create", "claimpools", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
		rv++
		obj.SetResourceVersion(strconv.Itoa(rv))
		if err := fc.Tracker().Create(ClaimPoolResource, obj, ""); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
	fc.PrependReactor("update", "claimpools", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
		cur, err := fc.Tracker().Get(ClaimPoolResource, "", obj.GetName())
		if err != nil {
			return true, nil, err
		}
		if cur.(metav1.Object).GetResourceVersion() != obj.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(ClaimPoolResource.GroupResource(), obj.GetName(), nil)
		}
		rv++
		obj.SetResourceVersion(strconv.Itoa(rv))
		return true, obj, fc.Tracker().Update(ClaimPoolResource, obj, "")
	})
	return fc
}

func testClaims(fc *dynamicfake.FakeDynamicClient, node string) *Claims {
	return NewClaims(fc, node, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func routeReq(ns, pod, att string, prefixes ...string) agentapi.Request {
	r := agentapi.Request{Op: agentapi.OpClaim, Namespace: ns, Name: pod, UID: "uid-" + pod, Attachment: att}
	for _, p := range prefixes {
		r.Claims = append(r.Claims, agentapi.Claim{Kind: agentapi.ClaimRoute, Value: p})
	}
	return r
}

// entries are the entries of pool p ("" when it does not exist).
func entries(t *testing.T, fc *dynamicfake.FakeDynamicClient, p string) []claimEntry {
	t.Helper()
	obj, err := fc.Resource(ClaimPoolResource).Get(context.Background(), p, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	pool, err := decodePool(obj)
	if err != nil {
		t.Fatal(err)
	}
	return pool.Spec.Entries
}

func wantCode(t *testing.T, what string, resp *agentapi.Response, code uint, mention ...string) {
	t.Helper()
	if resp.Code != code {
		t.Fatalf("%s: code %d (%s), want %d", what, resp.Code, resp.Error, code)
	}
	for _, m := range mention {
		if !strings.Contains(resp.Error, m) {
			t.Errorf("%s: %q does not mention %q", what, resp.Error, m)
		}
	}
}

// TestClaimAcrossNodes: a route held by a pod of node-a refuses, on
// node-b, the same route, a more specific one and a wider one, naming the
// holder and its node; a disjoint route is held; a repeated claim of the
// same attachment is no conflict with itself; a release frees the route.
func TestClaimAcrossNodes(t *testing.T) {
	ctx := context.Background()
	fc := fakePools(t)
	a, b := testClaims(fc, "node-a"), testClaims(fc, "node-b")
	wantCode(t, "first claim", a.Claim(ctx, routeReq("nf-a", "r0", "c0/eth0", "198.51.100.0/24")), 0)
	wantCode(t, "repeated claim", a.Claim(ctx, routeReq("nf-a", "r0", "c0/eth0", "198.51.100.0/24")), 0)
	for _, p := range []string{"198.51.100.0/24", "198.51.100.128/25", "198.51.0.0/16"} {
		resp := b.Claim(ctx, routeReq("nf-b", "r1", "c1/eth0", p))
		wantCode(t, p, resp, 7, "podwire.io/routes", p, "nf-a/r0 (node node-a)", "nf-b/r1")
		if resp.Reason != agentapi.RefusalRouteOverlap {
			t.Errorf("%s: reason %q", p, resp.Reason)
		}
	}
	wantCode(t, "disjoint", b.Claim(ctx, routeReq("nf-b", "r1", "c1/eth0", "198.51.101.0/24")), 0)
	if es := entries(t, fc, routesPool); len(es) != 2 {
		t.Fatalf("pool routes: %+v, want one entry per pod", es)
	}
	wantCode(t, "release", a.Release(ctx, "c0/eth0"), 0)
	wantCode(t, "after the release", b.Claim(ctx, routeReq("nf-b", "r2", "c2/eth0", "198.51.100.0/25")), 0)
}

// TestClaimVLANAcrossNodes: a static address held on VLAN 100 by a pod of
// node-a refuses it on node-b on VLAN 100 but not on VLAN 101; a VRRP
// group is shared by its namespace's pods across nodes and refused to
// another namespace; a pod refused on its second pool gives back the first.
func TestClaimVLANAcrossNodes(t *testing.T) {
	ctx := context.Background()
	fc := fakePools(t)
	a, b := testClaims(fc, "node-a"), testClaims(fc, "node-b")
	addr := func(ns, pod, att string, vlan uint16, ip string) agentapi.Request {
		return agentapi.Request{Op: agentapi.OpClaim, Namespace: ns, Name: pod, Attachment: att,
			Claims: []agentapi.Claim{{Kind: agentapi.ClaimAddress, Value: ip, VLAN: vlan}}}
	}
	vip := func(ns, pod, att string, vrid uint8, ip string) agentapi.Request {
		return agentapi.Request{Op: agentapi.OpClaim, Namespace: ns, Name: pod, Attachment: att,
			Claims: []agentapi.Claim{{Kind: agentapi.ClaimVIP, Value: ip, VLAN: 100, VRID: vrid}}}
	}
	wantCode(t, "address", a.Claim(ctx, addr("team-a", "p0", "c0/net1", 100, "192.0.2.10")), 0)
	wantCode(t, "same address, other node", b.Claim(ctx, addr("team-b", "p1", "c1/net1", 100, "192.0.2.10")), 7,
		"podwire.io/vlan-ips", "192.0.2.10", "team-a/p0 (node node-a)")
	wantCode(t, "same address, other VLAN", b.Claim(ctx, addr("team-b", "p1", "c1/net1", 101, "192.0.2.10")), 0)
	wantCode(t, "VRRP group", a.Claim(ctx, vip("nf-a", "vr0", "c2/net1", 7, "192.0.2.100")), 0)
	wantCode(t, "the group's other router", b.Claim(ctx, vip("nf-a", "vr1", "c3/net1", 7, "192.0.2.100")), 0)
	resp := b.Claim(ctx, vip("nf-b", "vr2", "c4/net1", 7, "192.0.2.100"))
	wantCode(t, "the group from another namespace", resp, 7, "podwire.io/vrrp", "VRID 7", "namespace nf-a")
	if resp.Reason != agentapi.RefusalVRRPGroup {
		t.Errorf("reason %q, want %q", resp.Reason, agentapi.RefusalVRRPGroup)
	}
	wantCode(t, "the group's address, another VRID", b.Claim(ctx, vip("nf-b", "vr2", "c4/net1", 8, "192.0.2.100")), 7, "192.0.2.100", "VRID 7")

	// A pod asking for a free route and a held address: refused, and its
	// route given back.
	both := routeReq("nf-b", "r9", "c9/eth0", "203.0.113.0/24")
	both.Claims = append(both.Claims, agentapi.Claim{Kind: agentapi.ClaimAddress, Value: "192.0.2.10", VLAN: 100})
	wantCode(t, "route and held address", b.Claim(ctx, both), 7, "192.0.2.10")
	for _, e := range entries(t, fc, routesPool) {
		if e.Attachment == "c9/eth0" {
			t.Errorf("a refused pod holds %s %s", e.Kind, e.Value)
		}
	}
}

// TestClaimRetriesOnConflict: an update that loses a race (a Conflict)
// reads the pool again and checks again: a claim that became held in the
// meantime is refused, a free one is held.
func TestClaimRetriesOnConflict(t *testing.T) {
	ctx := context.Background()
	fc := fakePools(t)
	a, b := testClaims(fc, "node-a"), testClaims(fc, "node-b")
	wantCode(t, "seed", a.Claim(ctx, routeReq("nf-a", "r0", "c0/eth0", "192.0.2.0/28")), 0)
	// node-b's first update conflicts: node-a took 198.51.100.0/24 between
	// node-b's read and its write.
	var once sync.Once
	fc.PrependReactor("update", "claimpools", func(k8stesting.Action) (bool, runtime.Object, error) {
		hit := false
		once.Do(func() { hit = true })
		if !hit {
			return false, nil, nil
		}
		obj, _ := fc.Tracker().Get(ClaimPoolResource, "", routesPool)
		u := obj.(*unstructured.Unstructured).DeepCopy()
		pool, _ := decodePool(u)
		pool.Spec.Entries = append(pool.Spec.Entries, claimEntry{Kind: agentapi.ClaimRoute, Value: "198.51.100.0/24",
			Namespace: "nf-a", Pod: "r1", Node: "node-a", Attachment: "c1/eth0"})
		spec, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&pool.Spec)
		u.Object["spec"] = spec
		u.SetResourceVersion(u.GetResourceVersion() + "0")
		if err := fc.Tracker().Update(ClaimPoolResource, u, ""); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewConflict(ClaimPoolResource.GroupResource(), routesPool, nil)
	})
	wantCode(t, "claim that lost the race", b.Claim(ctx, routeReq("nf-b", "r2", "c2/eth0", "198.51.100.128/25")), 7, "nf-a/r1 (node node-a)")
	wantCode(t, "a free claim after it", b.Claim(ctx, routeReq("nf-b", "r2", "c2/eth0", "203.0.113.0/24")), 0)
}

// barrierPools holds each node's first read of a pool until every node has
// read it, so that their writes race on what they all read.
type barrierPools struct {
	dynamic.NamespaceableResourceInterface
	reads *sync.WaitGroup
	once  sync.Once
}

func (b *barrierPools) Get(ctx context.Context, name string, opts metav1.GetOptions, sub ...string) (*unstructured.Unstructured, error) {
	obj, err := b.NamespaceableResourceInterface.Get(ctx, name, opts, sub...)
	b.once.Do(func() {
		b.reads.Done()
		b.reads.Wait()
	})
	return obj, err
}

// TestClaimRace: three nodes claiming the same prefix at once, each having
// read the pool before any writes (absent in even rounds: three creates;
// present in odd ones: three updates of one resourceVersion), many times:
// exactly one wins each round, the others are refused naming it.
func TestClaimRace(t *testing.T) {
	ctx := context.Background()
	for round := range 20 {
		fc := fakePools(t)
		if round%2 == 1 {
			wantCode(t, "seed", testClaims(fc, "node-s").Claim(ctx, routeReq("nf-s", "s", "s/eth0", "192.0.2.0/24")), 0)
		}
		var reads sync.WaitGroup
		nodes := []*Claims{testClaims(fc, "node-a"), testClaims(fc, "node-b"), testClaims(fc, "node-c")}
		reads.Add(len(nodes))
		for _, c := range nodes {
			c.pools = &barrierPools{NamespaceableResourceInterface: c.pools, reads: &reads}
		}
		resps := make([]*agentapi.Response, len(nodes))
		var wg sync.WaitGroup
		for i, c := range nodes {
			wg.Go(func() {
				resps[i] = c.Claim(ctx, routeReq("nf-"+strconv.Itoa(i), "r", "c/eth0", "198.51.100.0/24"))
			})
		}
		wg.Wait()
		won := 0
		for _, r := range resps {
			switch {
			case r.Code == 0:
				won++
			case r.Code != 7 || !strings.Contains(r.Error, "/r (node node-"):
				t.Fatalf("round %d: %+v", round, r)
			}
		}
		if want := 1 + round%2; won != 1 || len(entries(t, fc, routesPool)) != want {
			t.Fatalf("round %d: %d won, entries %+v: want exactly one winner", round, won, entries(t, fc, routesPool))
		}
	}
}

// TestClaimAPIDown: an apiserver error is CNI error 11, never a grant.
func TestClaimAPIDown(t *testing.T) {
	fc := fakePools(t)
	fc.PrependReactor("get", "claimpools", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd down")
	})
	wantCode(t, "API down", testClaims(fc, "node-a").Claim(context.Background(), routeReq("nf-a", "r0", "c0/eth0", "198.51.100.0/24")), 11, "etcd down")
}

// TestClaimsSync: the reconciler releases this node's entries without a
// record once older than the grace (never after a failed read of the
// records), and those of a Node that is gone; it claims again what a
// record holds and the pool lacks.
func TestClaimsSync(t *testing.T) {
	ctx := context.Background()
	fc := fakePools(t)
	a := testClaims(fc, "node-a")
	dir := t.TempDir()
	now := time.Now()
	a.now = func() time.Time { return now }
	wantCode(t, "recorded", a.Claim(ctx, routeReq("nf-a", "r0", "c0/eth0", "198.51.100.0/25")), 0)
	wantCode(t, "unrecorded", a.Claim(ctx, routeReq("nf-a", "r1", "c1/eth0", "198.51.100.128/25")), 0)
	wantCode(t, "other node", testClaims(fc, "node-x").Claim(ctx, routeReq("nf-x", "r2", "c2/eth0", "203.0.113.0/24")), 0)
	rec := &state.Record{ContainerID: "c0", IfName: "eth0", PodNamespace: "nf-a", PodName: "r0", Complete: true,
		Routes: []state.Route{{Dst: netip.MustParsePrefix("198.51.100.0/25")}}}
	if err := state.New(dir).Put(rec); err != nil {
		t.Fatal(err)
	}
	rec3 := &state.Record{ContainerID: "c3", IfName: "eth0", PodNamespace: "nf-a", PodName: "r3", Complete: true,
		Routes: []state.Route{{Dst: netip.MustParsePrefix("192.0.2.0/24")}}}
	if err := state.New(dir).Put(rec3); err != nil {
		t.Fatal(err)
	}
	gone := func(n string) bool { return n == "node-x" }
	values := func() []string {
		var s []string
		for _, e := range entries(t, fc, routesPool) {
			s = append(s, e.Value)
		}
		return s
	}
	// Within the grace: c1 stays; node-x's goes; c3 is claimed again.
	if err := a.Sync(ctx, dir, gone); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(values(), " "); got != "198.51.100.0/25 198.51.100.128/25 192.0.2.0/24" {
		t.Fatalf("after the first sync: %s", got)
	}
	// The records unreadable: nothing of this node is released.
	now = now.Add(2 * claimGrace)
	if err := os.WriteFile(filepath.Join(dir, "c9-eth0.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx, dir, gone); err == nil {
		t.Error("a failed read of the records is no error")
	}
	if got := len(values()); got != 3 {
		t.Fatalf("after a failed read of the records: %v", values())
	}
	if err := os.Remove(filepath.Join(dir, "c9-eth0.json")); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx, dir, gone); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(values(), " "); got != "198.51.100.0/25 192.0.2.0/24" {
		t.Fatalf("after the grace: %s", got)
	}
}

// TestRouteHeld: the agent routes another node's prefix only when the
// ClaimPool routes holds it for a pod of that node.
func TestRouteHeld(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := fakePools(t)
	a := testClaims(fc, "node-a")
	p := netip.MustParsePrefix("198.51.100.0/24")
	if _, err := a.RouteHeld("node-a", p); err == nil {
		t.Error("RouteHeld answered before the informer listed the pool")
	}
	wantCode(t, "claim", a.Claim(ctx, routeReq("nf-a", "r0", "c0/eth0", p.String())), 0)
	go a.routes.Run(ctx.Done())
	ag := &Agent{cfg: Config{Cluster: ClusterWatch{Claims: a}}}
	forged := forwarding.RemoteRoute{Dst: p, Node: "node-b"}
	real := forwarding.RemoteRoute{Dst: p, Node: "node-a"}
	other := forwarding.RemoteRoute{Dst: netip.MustParsePrefix("203.0.113.0/24"), Node: "node-a"}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return a.routes.HasSynced(), nil
	}); err != nil {
		t.Fatal(err)
	}
	want, skipped := ag.heldRoutes([]forwarding.RemoteRoute{forged, real, other}, nil)
	if len(want) != 1 || want[0] != real || len(skipped) != 2 || !strings.Contains(skipped[0], "node node-b: not held") {
		t.Fatalf("routed %v, skipped %q: want %v alone", want, skipped, real)
	}
}

// TestSyncReadsRoutesFromCache: once the routes pool's informer has
// synced, the reconciler lists only the other pools (the routes pool, the
// cluster's every route, comes from the cache) and still releases the
// entries of a Node that is gone from it.
func TestSyncReadsRoutesFromCache(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := fakePools(t)
	a := testClaims(fc, "node-a")
	wantCode(t, "other node", testClaims(fc, "node-x").Claim(ctx, routeReq("nf-x", "r2", "c2/eth0", "203.0.113.0/24")), 0)
	go a.routes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.routes.HasSynced) {
		t.Fatal("routes pool not synced")
	}
	fc.ClearActions()
	if err := a.Sync(ctx, t.TempDir(), func(n string) bool { return n == "node-x" }); err != nil {
		t.Fatal(err)
	}
	lists := 0
	for _, act := range fc.Actions() {
		if l, ok := act.(k8stesting.ListAction); ok {
			lists++
			if fs := l.GetListRestrictions().Fields.String(); fs != "metadata.name!="+routesPool {
				t.Errorf("the reconciler listed the pools with field selector %q", fs)
			}
		}
	}
	if lists != 1 {
		t.Errorf("%d LISTs of the pools, want 1 (%v)", lists, fc.Actions())
	}
	if es := entries(t, fc, routesPool); len(es) != 0 {
		t.Errorf("node-x's entries not released: %v", es)
	}
}
