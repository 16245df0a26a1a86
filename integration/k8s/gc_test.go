package k8s

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRuntimeGC (CRI-O leg): CRI-O calls the chain's GC when it starts,
// with the sandboxes it restored as the valid attachments, and podwire's GC
// removes what a lost DEL left while keeping every live pod. The stale
// attachment is a live pod's earlier sandbox whose DEL never came: the
// node's chain ADDed through cnitool (as a runtime would) in a netns of
// its own, the netns then gone and the runtime's CNI cache of it lost, so
// that nothing but GC can name it (with the cache, libcni's GC step DELs it
// first). Before crio restarts, podwire holds its record and its address
// is in the node's ruleset (the control: without a GC both stay); after,
// both are gone, podwire's log says GC removed it, and the live pod keeps
// its record, its element and its source check (packets). containerd never
// calls GC (containerd/go-cni#131): the test skips there, saying so.
func TestRuntimeGC(t *testing.T) {
	needCluster(t)
	if !c.Runtime().IsCRIO() {
		t.Skip("containerd never calls CNI GC (containerd/go-cni#131); this runs on the CRI-O leg")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	live := runPod(t, "default", "gc-live", nil)
	if genuine, passed := spoofFrom(t, live, 7040); !genuine || len(passed) > 0 {
		t.Fatalf("before: genuine %v, forged passed %v; want the pod checked", genuine, passed)
	}

	// The stale attachment: ADD of the node's chain through cnitool in the
	// node (its conflist, /opt/cni/bin, /var/lib/cni, /run/podwire), for
	// the live pod's name and UID, in the netns pwgc-stale.
	const netns = "/run/netns/pwgc-stale"
	add := n1.Command(ctx, "sh", "-c", `ip netns add pwgc-stale && exec "$0" add k8s-pod-network `+netns,
		filepath.Join(os.Getenv("PODWIRE_CNI_BIN"), "cnitool"))
	add.Env = append(os.Environ(), "CNI_PATH=/opt/cni/bin", "NETCONFPATH=/etc/cni/net.d",
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=gc-live;K8S_POD_UID="+live.uid)
	out, err := add.CombinedOutput()
	t.Cleanup(func() { n1.Command(context.Background(), "ip", "netns", "del", "pwgc-stale").Run() })
	if err != nil {
		t.Fatalf("cnitool add in the node: %v\n%s", err, out)
	}
	var result struct {
		IPs []struct{ Address string }
	}
	if err := json.Unmarshal(out, &result); err != nil || len(result.IPs) == 0 {
		t.Fatalf("cnitool's result has no address: %v\n%s", err, out)
	}
	staleIP, _, _ := strings.Cut(result.IPs[0].Address, "/")
	var staleID string
	for _, r := range records(t) {
		if strings.HasPrefix(r, "cnitool-") {
			staleID, _, _ = strings.Cut(r, "_")
		}
	}
	if staleID == "" {
		t.Fatalf("podwire recorded no attachment of cnitool's ADD: records %v", records(t))
	}
	caches, _ := filepath.Glob(n1.Path("/var/lib/cni/results/*" + staleID + "*"))
	for _, f := range caches {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := n1.Command(ctx, "ip", "netns", "del", "pwgc-stale").CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	staleRE := ipRE(staleIP)
	if !hasRecord(t, staleID) || !staleRE.MatchString(nodeRuleset(t)) {
		t.Fatalf("the stale attachment %s (%s): record %v, element %v; want both before the GC (the control)",
			staleID, staleIP, hasRecord(t, staleID), staleRE.MatchString(nodeRuleset(t)))
	}
	t.Logf("stale attachment %s at %s: record and element held, its netns and CNI cache (%d files) gone", staleID, staleIP, len(caches))

	// crio restarts; its GC at start-up names the restored sandboxes only.
	end := readiness.expectNotReady("crio restarting (TestRuntimeGC)")
	start := time.Now()
	if err := n1.RestartCRIO(ctx); err != nil {
		end()
		t.Fatal(err)
	}
	t.Logf("crio restarted in %v", time.Since(start).Round(time.Millisecond))
	for hasRecord(t, staleID) || staleRE.MatchString(nodeRuleset(t)) {
		if ctx.Err() != nil {
			end()
			t.Fatalf("after crio's restart the stale attachment %s is left: record %v, element of %s %v\n%s",
				staleID, hasRecord(t, staleID), staleIP, staleRE.MatchString(nodeRuleset(t)), tail(podwireLog(), 3000))
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("the stale attachment's record and element removed %v after crio's restart began", time.Since(start).Round(time.Millisecond))
	if err := c.WaitNodesReady(ctx); err != nil {
		end()
		t.Fatal(err)
	}
	end()
	if !logHas(podwireLog(), "GC removed", "gcContainerID="+staleID) {
		t.Errorf("podwire's log does not say GC removed %s:\n%s", staleID, tail(podwireLog(), 3000))
	}
	if !hasRecord(t, live.sandbox) || !podIPRE(live).MatchString(nodeRuleset(t)) {
		t.Fatalf("the live pod lost its record (%v) or element (%v) in the GC", hasRecord(t, live.sandbox), podIPRE(live).MatchString(nodeRuleset(t)))
	}
	if genuine, passed := spoofFrom(t, live, 7041); !genuine || len(passed) > 0 {
		t.Fatalf("after the GC: genuine %v, forged passed %v; want the live pod still checked", genuine, passed)
	}
}
