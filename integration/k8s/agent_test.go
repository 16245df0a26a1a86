package k8s

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/cnitest"
)

// TestAgentRepairsTablesWithoutADD: the node's whole ruleset is flushed
// behind podwire's back (`nft flush ruleset` in the node netns); with no
// ADD, the node agent puts podwire's tables back within 10 s, with the
// elements of the pods wired before: such a pod is checked again (a forged
// source is dropped), and the repair is an Event on the Node.
func TestAgentRepairsTablesWithoutADD(t *testing.T) {
	needCluster(t)
	p := runPod(t, "default", "repair-victim", nil)
	if genuine, passed := spoofFrom(t, p, 7020); !genuine || len(passed) > 0 {
		t.Fatalf("before the drift: genuine %v, forged passed %v; want the pod checked", genuine, passed)
	}
	before := podwireTables(nodeRuleset(t))
	// The flush succeeding is the proof that every table is gone: the
	// agent repairs within milliseconds of nftables' notification, so a
	// listing after it, even by the next command, may already see
	// podwire's tables back. The rebuild in the agent's log, below, is
	// the proof that the repair was the agent's.
	flushed := time.Now()
	out, err := exec.Command("nsenter", "--net="+n1.NetNS, "nft", "flush", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft flush ruleset: %v: %s", err, out)
	}
	start := time.Now()
	// Until the agent's next tick (every 3 s) the check is off; the
	// repair may also come first, so this probe is only reported.
	genuine, passed := spoofFrom(t, p, 7021)
	t.Logf("right after the flush: genuine %v, forged passed %v", genuine, passed)
	for port := 7022; ; port++ {
		genuine, passed := spoofFrom(t, p, port)
		if genuine && len(passed) == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the source check was not back 10 s after the drift (no ADD ran):\n%s", agentLog(context.Background()))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the agent repaired the tables %v after the flush, with no ADD", time.Since(start).Round(time.Millisecond))
	logs := kubectl(t, "", "-n", agentNS, "logs", "ds/podwire-agent", "--since-time="+flushed.Add(-time.Second).UTC().Format(time.RFC3339))
	if !strings.Contains(logs, "were repaired: rebuilt [") {
		t.Fatalf("the agent's log since the flush names no rebuild of podwire's tables:\n%s", logs)
	}
	if after := podwireTables(nodeRuleset(t)); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("podwire's tables after the repair %v, before the flush %v", after, before)
	}
	events := kubectl(t, "", "get", "events", "-A", "--field-selector",
		"involvedObject.kind=Node,involvedObject.name="+n1.Name+",reason=PodwireTablesRepaired", "-o", "name")
	if strings.TrimSpace(events) == "" {
		t.Fatalf("no PodwireTablesRepaired Event on Node %s", n1.Name)
	}
}

// podwireTables lists the "table FAMILY NAME" lines of podwire's tables in
// an `nft list ruleset` text.
func podwireTables(ruleset string) []string {
	var tables []string
	for _, l := range strings.Split(ruleset, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "table" && strings.HasPrefix(f[2], "podwire") {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	return tables
}

// TestStatusShowsAgent: `podwire status` on the node (the binary the agent
// installed, in the node's namespaces) reports the agent's own state: it is
// Ready for this node and keeps the primary's conflist, and the node tables
// are current.
func TestStatusShowsAgent(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, out, err := cnitest.RunStatus(n1.Command(ctx, "/opt/cni/bin/podwire", "status", "--conf-dir", "/etc/cni/net.d", "--json"))
	if err != nil {
		t.Fatal(err)
	}
	if a := st.Agent; a == nil || a.Node != n1.Name || !a.Ready || filepath.Base(a.Conflist) != filepath.Base(n1.PrimaryConflist) {
		t.Fatalf("podwire status shows agent %+v, want Ready on %s keeping %s:\n%s", a, n1.Name, filepath.Base(n1.PrimaryConflist), out)
	}
	if len(st.Tables) == 0 || len(st.NotCurrent()) > 0 {
		t.Fatalf("podwire status: tables not current %v of %d:\n%s", st.NotCurrent(), len(st.Tables), out)
	}
	t.Logf("podwire status: agent Ready on %s, chain %s (mode %s), %d tables current", st.Agent.Node, st.Agent.Conflist, st.Agent.Mode, len(st.Tables))
}
