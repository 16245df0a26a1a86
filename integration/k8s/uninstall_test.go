package k8s

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestUninstallLeavesPodsDeletable: `kubectl delete -f deploy/` (the
// uninstall of docs/operations.md: DaemonSet, RBAC, namespace) stops the agent, which
// finds its DaemonSet gone (cni.uninstall) and marks the uninstall. A pod
// podwire wired is left, so podwire's entry and binary stay: containerd
// runs that pod's DEL through the chain it has then. The pod is deleted
// cleanly through the API afterwards (the DEL works from podwire's record
// alone), and that last DEL takes the entry out of the node's conflist and
// removes the plugin binary and stateDir. It runs last (this file sorts
// last): the node has no agent afterwards.
func TestUninstallLeavesPodsDeletable(t *testing.T) {
	needCluster(t)
	p := runPod(t, "default", "outlives-agent", nil)
	if !hasRecord(t, p.sandbox) || !podIPRE(p).MatchString(nodeRuleset(t)) {
		t.Fatalf("before the uninstall: record %v, element of %s %v: want both", hasRecord(t, p.sandbox), p.ip, podIPRE(p).MatchString(nodeRuleset(t)))
	}
	agentUID := kubectl(t, "", "-n", agentNS, "get", "pods", "-l", "app.kubernetes.io/name=podwire-agent",
		"-o", "jsonpath={.items[0].metadata.uid}")
	start := time.Now()
	kubectl(t, "", "delete", "-f", deployDir, "--wait=true", "--timeout=120s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		s, err := n1.Sandboxes(ctx, agentUID)
		if err == nil && !anyReady(s) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the agent's pod (uid %s) still runs on the node after the uninstall: %v %v", agentUID, s, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if sock := filepath.Join(stateDir, "agent.sock"); fileExists(sock) {
		// The socket file may stay; nothing may answer it (a plugin then
		// fails fast instead of waiting for an agent that is gone).
		if conn, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			conn.Close()
			t.Fatalf("something still answers %s after the uninstall", sock)
		}
	}
	t.Logf("uninstalled in %v", time.Since(start).Round(time.Millisecond))
	binary := n1.Path("/opt/cni/bin/podwire")
	if !fileExists(filepath.Join(stateDir, "uninstalled")) {
		t.Fatalf("no uninstall marker in %s after the uninstall (records: %v)", stateDir, records(t))
	}
	if !strings.Contains(readFile(t, n1.PrimaryConflist), `"podwire"`) || !fileExists(binary) {
		t.Fatalf("podwire's entry in %s: %v, binary %s: %v, while %s/%s, which podwire wired, still runs: want both, for its DEL",
			n1.PrimaryConflist, strings.Contains(readFile(t, n1.PrimaryConflist), `"podwire"`), binary, fileExists(binary), p.namespace, p.name)
	}

	start = time.Now()
	deletePod(t, "default", "outlives-agent")
	waitSandboxRemoved(t, p)
	t.Logf("pod deleted and its sandbox removed %v after the delete, with no agent", time.Since(start).Round(time.Millisecond))
	checkPodLeftNothing(t, p)
	// The sandbox's removal ran the DELs: the last one took podwire out of
	// the chain and removed the binary and stateDir.
	conf := readFile(t, n1.PrimaryConflist)
	if strings.Contains(conf, `"podwire"`) || fileExists(binary) || fileExists(stateDir) {
		t.Fatalf("after the last pod podwire wired was deleted: binary %s there: %v, stateDir %s there: %v (records left: %v), conflist:\n%s",
			binary, fileExists(binary), stateDir, fileExists(stateDir), records(t), conf)
	}
	if derived := filepath.Join(n1.CNIConfDir, "00-podwire.conflist"); fileExists(derived) {
		t.Fatalf("%s is still there after the uninstall", derived)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func anyReady(sandboxes []*runtimeapi.PodSandbox) bool {
	for _, s := range sandboxes {
		if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			return true
		}
	}
	return false
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
