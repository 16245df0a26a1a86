package multinode

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/packets"
)

// TestFlannelRestartRewritesConflist: flannel's own pod on node 2 is
// deleted, and its DaemonSet's replacement runs flannel's install-cni init
// container, which copies flannel's conflist over 10-flannel.conflist
// without podwire (`cp -f /etc/kube-flannel/cni-conf.json ...`, as on
// every flannel restart or upgrade). Node 2's agent counts a restore
// (podwire_conflist_restores_total) and the file names podwire again; once
// containerd has reloaded the chain, a pod created on node 2 is
// source-checked: its forged datagram is dropped, its genuine one arrives.
func TestFlannelRestartRewritesConflist(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	restores := func(s scrape) float64 { return s.sum("podwire_conflist_restores_total", nil) }
	before := restores(mustScrape(t, n2))

	b, err := c.API(ctx, "GET", "/api/v1/namespaces/kube-flannel/pods?fieldSelector=spec.nodeName%3D"+n2.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name, UID string } `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("flannel's pod on %s: %v %s", n2.Name, err, b)
	}
	old := list.Items[0].Metadata
	start := time.Now()
	if _, err := c.API(ctx, "DELETE", "/api/v1/namespaces/kube-flannel/pods/"+old.Name, nil); err != nil {
		t.Fatal(err)
	}
	s := waitMetric(t, n2, 2*time.Minute, "a conflist restore after flannel's restart", func(s scrape) bool { return restores(s) > before })
	t.Logf("%s: flannel's pod %s deleted; its replacement rewrote the conflist and the agent restored podwire's entry (restores %v -> %v) %v later",
		n2.Name, old.Name, before, restores(s), time.Since(start).Round(100*time.Millisecond))
	conflist := filepath.Join(n2.CNIConfDir, "10-flannel.conflist")
	if got, err := os.ReadFile(conflist); err != nil || !strings.Contains(string(got), `"podwire"`) {
		t.Fatalf("%s after the restore: %v\n%s", conflist, err, got)
	}
	if err := waitChain(ctx, n2); err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd reloaded flannel's chain with podwire %v after the deletion", time.Since(start).Round(100*time.Millisecond))

	receiver := runPod(t, "default", "rewrite-receiver", n1, nil)
	p := runPod(t, "default", "after-rewrite", n2, nil)
	sink, to := listen(t, receiver, 7403)
	forged := netip.MustParseAddr("10.244.0.252")
	if err := packets.SendFrom(p.netns, forged, to, "forged", 5); err != nil {
		t.Fatal(err)
	}
	if err := packets.SendFrom(p.netns, p.ip4, to, "genuine", 5); err != nil {
		t.Fatal(err)
	}
	if !sink.WaitGot(p.ip4, "genuine", 10*time.Second) {
		t.Fatalf("the genuine datagrams of %s did not arrive", p.name)
	}
	time.Sleep(200 * time.Millisecond)
	if sink.Got(forged, "forged") {
		t.Fatalf("a pod created on %s after flannel's rewrite is not checked: its datagram forged from %s arrived", n2.Name, forged)
	}
}
