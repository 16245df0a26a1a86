package multinode

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/packets"
)

// churnResult is what one churn worker saw.
type churnResult struct {
	pods     int
	failures []string
}

// churn creates and deletes pods on node index ni until stop closes, one
// at a time: each, once Ready, sends datagrams forged from 203.0.113.77
// and then genuine ones to the sink; a pod whose genuine datagrams do not
// arrive, or whose forged one does (it would be unchecked), is a failure,
// as is a creation that does not complete (TestRollingUpgrade waits for
// the deletions).
func churn(ctx context.Context, worker string, ni int, sink *packets.Sink, dst netip.AddrPort, stop <-chan struct{}) churnResult {
	var r churnResult
	forged := netip.MustParseAddr("203.0.113.77")
	n := c.Nodes[ni]
	for i := 0; ; i++ {
		select {
		case <-stop:
			return r
		default:
		}
		name := fmt.Sprintf("churn-%s-%d", worker, i)
		p, err := startPod(ctx, "default", name, n, map[string]string{"churn": "1"})
		r.pods++
		if err != nil {
			r.failures = append(r.failures, fmt.Sprintf("%s on %s: %v", name, n.Name, err))
		} else {
			packets.SendFrom(p.netns, forged, dst, "forged-"+name, 3)
			packets.SendFrom(p.netns, p.ip4, dst, "genuine-"+name, 3)
			if !sink.WaitGot(p.ip4, "genuine-"+name, 5*time.Second) {
				r.failures = append(r.failures, fmt.Sprintf("%s on %s: its genuine datagrams did not arrive", name, n.Name))
			} else if sink.Got(forged, "forged-"+name) {
				r.failures = append(r.failures, fmt.Sprintf("%s on %s: UNCHECKED, its forged datagram arrived", name, n.Name))
			}
		}
		// Not waiting: the deletions complete in the background, and the
		// test waits for all of them at the end.
		if _, err := c.Kubectl(ctx, "", "delete", "pod", "-n", "default", name, "--wait=false"); err != nil {
			r.failures = append(r.failures, fmt.Sprintf("delete %s: %v", name, err))
		}
	}
}

// TestRollingUpgrade: the DaemonSet moves from the image under test to a
// second build whose `podwire version` differs (`make image-upgrade`),
// pushed to the registry with the same command, while pods are created and
// deleted on both nodes: every creation and deletion completes, no pod
// created during the upgrade is unchecked (each one's forged datagram is
// dropped, its genuine ones arrive), no sandbox event reports a failure,
// and both nodes end running the second build's plugin binary.
func TestRollingUpgrade(t *testing.T) {
	needCluster(t)
	archive, ref := os.Getenv("PODWIRE_IMAGE_UPGRADE"), os.Getenv("PODWIRE_IMAGE_UPGRADE_REF")
	if archive == "" || ref == "" {
		t.Fatal("PODWIRE_IMAGE_UPGRADE and PODWIRE_IMAGE_UPGRADE_REF are not set (make test-k8s sets them, from make image-upgrade)")
	}
	ctx := context.Background()
	pinned, err := pushPodwire(ctx, archive, ref)
	if err != nil {
		t.Fatal(err)
	}
	wantVersion := ref[strings.LastIndex(ref, ":")+1:]

	const port = 7500
	receiver := runPod(t, "default", "upgrade-sink", c.Nodes[0], nil)
	sink, err := packets.NewSink(receiver.netns, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	dst := netip.AddrPortFrom(receiver.ip4, port)

	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Four workers per node: a pod's life here (created, Ready, datagrams,
	// deleted) takes a few seconds, and the issue asks for about two pods
	// a second.
	results := make([]churnResult, 4*len(c.Nodes))
	for w := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[w] = churn(ctx, fmt.Sprint(w), w%len(c.Nodes), sink, dst, stop)
		}()
	}
	time.Sleep(3 * time.Second) // churn before the upgrade too
	t0 := time.Now()
	_, err = c.Kubectl(ctx, "", "-n", agentNS, "set", "image", "ds/podwire-agent", "agent="+pinned)
	if err == nil {
		_, err = c.Kubectl(ctx, "", "-n", agentNS, "rollout", "status", "ds/podwire-agent", "--timeout=180s")
	}
	rolled := time.Since(t0)
	time.Sleep(3 * time.Second) // and after it
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("the upgrade to %s did not roll out: %v", pinned, err)
	}
	if _, err := c.Kubectl(ctx, "", "wait", "-n", "default", "--for=delete", "pod", "-l", "churn=1", "--timeout=180s"); err != nil {
		t.Errorf("the churn's pods were not all deleted: %v", err)
	}
	total, failures := 0, []string{}
	for _, r := range results {
		total += r.pods
		failures = append(failures, r.failures...)
	}
	elapsed := time.Since(start)
	t.Logf("rolled out %s in %.1fs; %d pods created and deleted in %.1fs (%.1f/s) on %d nodes", wantVersion, rolled.Seconds(), total, elapsed.Seconds(), float64(total)/elapsed.Seconds(), len(c.Nodes))
	for _, f := range failures {
		t.Error(f)
	}
	events, err := c.Kubectl(ctx, "", "get", "events", "-n", "default", "-o",
		`jsonpath={range .items[?(@.type=="Warning")]}{.involvedObject.name} {.reason}: {.message}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(events, "\n") {
		if strings.HasPrefix(l, "churn-") && (strings.Contains(l, "FailedCreatePodSandBox") || strings.Contains(l, "FailedKillPod")) {
			t.Errorf("sandbox event during the upgrade: %s", l)
		}
	}
	for _, n := range c.Nodes {
		out, err := n.Command(ctx, "/opt/cni/bin/podwire", "version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), wantVersion) {
			t.Errorf("%s runs plugin %q (%v), want version %s", n.Name, strings.TrimSpace(string(out)), err, wantVersion)
		}
	}
}
