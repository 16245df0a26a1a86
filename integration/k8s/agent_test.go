package k8s

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

// TestAgentRepairsTablesWithoutADD: podwire's source-check table is deleted
// behind its back (`nft delete table inet podwire` on the node); with no
// ADD, the node agent puts it back within 10 s, so a pod wired before is
// checked again (a forged source is dropped), and the repair is an Event on
// the Node.
func TestAgentRepairsTablesWithoutADD(t *testing.T) {
	p := runPod(t, "default", "repair-victim", nil)
	if genuine, passed := spoofFrom(t, p, 7020); !genuine || len(passed) > 0 {
		t.Fatalf("before the drift: genuine %v, forged passed %v; want the pod checked", genuine, passed)
	}
	out, err := exec.Command("nsenter", "--net="+c.NodeNetNS, "nft", "delete", "table", "inet", "podwire").CombinedOutput()
	if err != nil {
		t.Fatalf("nft delete table inet podwire: %v: %s", err, out)
	}
	start := time.Now()
	if genuine, passed := spoofFrom(t, p, 7021); !genuine || len(passed) == 0 {
		t.Fatalf("with the table deleted: genuine %v, forged passed %v; the drift did not turn the check off", genuine, passed)
	}
	for port := 7022; ; port++ {
		genuine, passed := spoofFrom(t, p, port)
		if genuine && len(passed) == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the source check was not back 10 s after the drift (no ADD ran):\n%s", c.LogTail("podwire-agent", 2000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the agent repaired the table %v after the drift, with no ADD", time.Since(start).Round(time.Millisecond))
	events := kubectl(t, "", "get", "events", "-A", "--field-selector",
		"involvedObject.kind=Node,involvedObject.name="+cluster.NodeName+",reason=PodwireTablesRepaired", "-o", "name")
	if strings.TrimSpace(events) == "" {
		t.Fatalf("no PodwireTablesRepaired Event on Node %s", cluster.NodeName)
	}
}
