package multinode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/pkg/atomicfile"
	"github.com/podwire/podwire/pkg/install"
	"github.com/podwire/podwire/pkg/nodestatus"
)

// kubectlPodwire runs `make build`'s kubectl-podwire with args, as the
// admin, from node 1's netns (where the apiserver answers), and returns
// its stdout and exit code.
func kubectlPodwire(ctx context.Context, args ...string) (string, int, error) {
	bin := filepath.Join(filepath.Dir(os.Getenv("PODWIRE_BIN")), "kubectl-podwire")
	argv := append([]string{"--net=" + c.Nodes[0].NetNS, "--", bin, "--kubeconfig=" + c.AdminKubeconfig}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return stdout.String(), 1, nil
	case err != nil:
		return stdout.String(), -1, fmt.Errorf("kubectl-podwire %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), 0, nil
}

// statusView is what `kubectl podwire status -o json` prints of a node.
type statusView struct {
	Node       string             `json:"node"`
	Healthy    bool               `json:"healthy"`
	Problems   []string           `json:"problems"`
	AgentReady bool               `json:"agentReady"`
	Status     *nodestatus.Status `json:"status"`
}

// podwireStatus runs `kubectl podwire status -o json` and returns each
// node's view by name, and the exit code.
func podwireStatus(ctx context.Context) (map[string]statusView, int, error) {
	out, code, err := kubectlPodwire(ctx, "status", "-o", "json")
	if err != nil {
		return nil, code, err
	}
	var doc struct{ Nodes []statusView }
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, code, fmt.Errorf("status -o json: %v\n%s", err, out)
	}
	m := map[string]statusView{}
	for _, v := range doc.Nodes {
		m[v.Node] = v
	}
	return m, code, nil
}

// awaitStatus polls `kubectl podwire status` until ok says yes of what it
// printed, for up to d.
func awaitStatus(t *testing.T, d time.Duration, what string, ok func(map[string]statusView, int) error) map[string]statusView {
	t.Helper()
	var last map[string]statusView
	err := cnitest.Eventually(d, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		v, code, err := podwireStatus(ctx)
		if err != nil {
			return err
		}
		last = v
		return ok(v, code)
	})
	if err != nil {
		t.Fatalf("kubectl podwire status: %s: %v\nlast: %+v", what, err, last)
	}
	return last
}

// allHealthy: every node listed and healthy, exit code 0.
func allHealthy(v map[string]statusView, code int) error {
	for _, n := range c.Nodes {
		if nv, ok := v[n.Name]; !ok || !nv.Healthy {
			return fmt.Errorf("%s: %+v", n.Name, nv.Problems)
		}
	}
	if code != 0 {
		return fmt.Errorf("exit code %d with every node healthy", code)
	}
	return nil
}

// helmTest runs `helm test` on the release; it returns the test Pod's log
// and whether the test passed.
func helmTest(t *testing.T) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := c.Helm(ctx, helmBin, "test", release, "--namespace", releaseNS, "--timeout", "2m")
	logs, _ := c.Kubectl(ctx, "", "-n", agentNS, "logs", "podwire-test-status")
	if err != nil {
		// The error holds helm's output.
		t.Logf("helm test failed: %v\nits Pod's log:\n%s", err, logs)
		return logs, false
	}
	t.Logf("helm test passed:\n%s\nits Pod's log:\n%s", strings.TrimSpace(out), logs)
	return logs, true
}

// TestKubectlPodwire: `kubectl podwire`, from the API alone, on the
// two-node cluster:
//   - status lists both nodes healthy (agent Ready, podwire in the chain,
//     tables verified), exits 0, and `helm test` passes;
//   - pods lists a wired pod with its node, and a refused pod with the
//     gate that refused it;
//   - after `nft flush ruleset` on node 2, status shows node 2's repair
//     (kube-proxy and flannel are restarted on node 2 after, to rebuild
//     their own tables);
//   - with node 2's conflist rewritten without podwire and made immutable
//     (chattr +i: the live agent cannot put podwire back), status exits 1
//     naming node 2 out of the chain, and `helm test` fails naming it;
//   - with node 2's agent stopped (SIGSTOP), status exits 1 naming node 2's
//     agent not Ready;
//   - once each fault is undone, both nodes are healthy again.
func TestKubectlPodwire(t *testing.T) {
	needCluster(t)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	wired := runPod(t, "default", "listed", n2, nil)
	v := awaitStatus(t, time.Minute, "both nodes healthy", allHealthy)
	for _, n := range c.Nodes {
		st := v[n.Name].Status
		t.Logf("%s: agent %s Ready, podwire in %s, %d attachments", n.Name, st.Agent.Version, st.Chain.Conflist, st.Counts.Wired)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, code, err := kubectlPodwire(ctx, "status"); err != nil || code != 0 || !strings.Contains(out, n1.Name) || !strings.Contains(out, n2.Name) {
		t.Errorf("status: exit %d, %v:\n%s", code, err, out)
	} else {
		t.Logf("kubectl podwire status:\n%s", out)
	}
	if _, ok := helmTest(t); !ok {
		t.Error("helm test failed on a healthy cluster")
	}

	// pods: the wired pod, and a refused one with its gate.
	if err := createPod(ctx, "default", "refused-listed", n2, nil, map[string]string{"podwire.io/forwarding": "true"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kubectl(t, "", "delete", "pod", "-n", "default", "refused-listed", "--ignore-not-found", "--wait=true", "--timeout=90s")
	})
	var pods struct {
		Pods []struct {
			Node        string `json:"node"`
			Namespace   string `json:"namespace"`
			Name        string `json:"name"`
			SourceCheck bool   `json:"sourceCheck"`
		}
		Refused []struct {
			Node, Namespace, Name, Gate, Message string
		}
	}
	err := cnitest.Eventually(time.Minute, func() error {
		out, _, err := kubectlPodwire(ctx, "pods", "-o", "json")
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(out), &pods); err != nil {
			return err
		}
		listed, refused := false, false
		for _, p := range pods.Pods {
			listed = listed || p.Namespace == "default" && p.Name == wired.name && p.Node == n2.Name && p.SourceCheck
		}
		for _, r := range pods.Refused {
			refused = refused || r.Namespace == "default" && r.Name == "refused-listed" && r.Node == n2.Name && r.Gate == "forwarding-namespace"
		}
		if !listed || !refused {
			return fmt.Errorf("wired pod listed %v, refused pod listed with its gate %v:\n%s", listed, refused, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := kubectlPodwire(ctx, "pods", "-n", "default"); err != nil || !strings.Contains(out, "refused-listed") || !strings.Contains(out, "forwarding-namespace") {
		t.Errorf("pods -n default: %v\n%s", err, out)
	} else {
		t.Logf("kubectl podwire pods -n default:\n%s", out)
	}

	// nft flush ruleset on node 2: the repair shows. The flush takes
	// kube-proxy's rules too, and with its NAT chains gone even the
	// agent's established connection to the kubernetes Service is no
	// longer translated: node 2's agent repairs its tables at once but
	// reaches the API again only once kube-proxy, restarted here as an
	// operator would, has laid its own back.
	before := v[n2.Name].Status.Tables.Repairs
	flushed := time.Now().Add(-time.Second)
	if out, err := n2.Command(ctx, "nft", "flush", "ruleset").CombinedOutput(); err != nil {
		t.Fatalf("%s: nft flush ruleset: %v\n%s", n2.Name, err, out)
	}
	restartNodeNetworking(t, n2)
	v = awaitStatus(t, time.Minute, "node 2's repair after nft flush ruleset", func(v map[string]statusView, _ int) error {
		tb := v[n2.Name].Status.Tables
		if tb.Repairs <= before || tb.LastRepair.Before(flushed) {
			return fmt.Errorf("%s: repairs %d (before %d), last %s", n2.Name, tb.Repairs, before, tb.LastRepair)
		}
		return nil
	})
	t.Logf("%s after nft flush ruleset: repair %d at %s: %s", n2.Name, v[n2.Name].Status.Tables.Repairs,
		v[n2.Name].Status.Tables.LastRepair.Format(time.RFC3339), v[n2.Name].Status.Tables.LastRepaired)
	awaitStatus(t, time.Minute, "healthy after kube-proxy's and flannel's restart", allHealthy)

	// Out of the chain, the agent alive but unable to put podwire back.
	conflist := filepath.Join(n2.CNIConfDir, "10-flannel.conflist")
	orig, err := os.ReadFile(conflist)
	if err != nil {
		t.Fatal(err)
	}
	without, _, err := install.RemoveEntry(orig)
	if err != nil {
		t.Fatal(err)
	}
	unpin := immutableFile(t, conflist, without, agentProcess(t, n2))
	v = awaitStatus(t, time.Minute, "node 2 out of the chain", func(v map[string]statusView, code int) error {
		nv := v[n2.Name]
		if code != 1 || nv.Healthy || !strings.Contains(strings.Join(nv.Problems, "\n"), "out of the runtime's chain") {
			return fmt.Errorf("exit %d, %s: %q", code, n2.Name, nv.Problems)
		}
		if !v[n1.Name].Healthy {
			return fmt.Errorf("%s not healthy: %q", n1.Name, v[n1.Name].Problems)
		}
		return nil
	})
	t.Logf("%s out of the chain: %q", n2.Name, v[n2.Name].Problems)
	if logs, ok := helmTest(t); ok || !strings.Contains(logs, n2.Name+": ") || !strings.Contains(logs, "out of the runtime's chain") {
		t.Errorf("helm test with podwire out of %s's chain: passed %v, its log does not name the node and the chain", n2.Name, ok)
	}
	unpin()
	awaitStatus(t, time.Minute, "healthy once the conflist may be written", allHealthy)

	// The agent down.
	pid := agentProcess(t, n2)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT) // gone if its liveness probe had it killed
		}
	}
	t.Cleanup(resume)
	stopped := time.Now()
	v = awaitStatus(t, time.Minute, "node 2's agent down", func(v map[string]statusView, code int) error {
		nv := v[n2.Name]
		if code != 1 || nv.Healthy || nv.AgentReady || !strings.Contains(strings.Join(nv.Problems, "\n"), "not Ready") {
			return fmt.Errorf("exit %d, %s: ready %v, %q", code, n2.Name, nv.AgentReady, nv.Problems)
		}
		return nil
	})
	t.Logf("%s's agent stopped: status exits 1 %v later: %q", n2.Name, time.Since(stopped).Round(time.Second), v[n2.Name].Problems)
	resume()
	awaitStatus(t, 2*time.Minute, "healthy once the agent runs again", allHealthy)
}

// fsImmutableFL is FS_IMMUTABLE_FL of include/uapi/linux/fs.h (chattr's
// 'i'), which golang.org/x/sys does not name.
const fsImmutableFL = 0x00000010

// immutableFile replaces path with data (atomically) and sets the inode's
// immutable flag (FS_IMMUTABLE_FL, chattr +i): no write, rename over it or
// unlink succeeds, root's included. The agent (pid) is stopped meanwhile,
// so that it cannot put its own file in place between the two. The
// returned func clears the flag and puts back what path held, as the test
// found it; the test's end calls it too.
func immutableFile(t *testing.T, path string, data []byte, pid int) func() {
	t.Helper()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Errorf("SIGCONT to the agent %d: %v", pid, err)
		}
	}()
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	setFlag := func(on bool) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
		if err != nil {
			return err
		}
		if on {
			flags |= fsImmutableFL
		} else {
			flags &^= fsImmutableFL
		}
		return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags))
	}
	if err := setFlag(true); err != nil {
		t.Fatalf("chattr +i %s: %v", path, err)
	}
	done := false
	undo := func() {
		if done {
			return
		}
		done = true
		if err := setFlag(false); err != nil {
			t.Errorf("chattr -i %s: %v", path, err)
			return
		}
		if err := atomicfile.WriteFile(path, orig, 0o644); err != nil {
			t.Errorf("putting %s back: %v", path, err)
		}
	}
	t.Cleanup(undo)
	return undo
}

// restartNodeNetworking deletes node n's kube-proxy and flannel pods and
// waits for their DaemonSets' new ones: they lay down their own nftables
// tables at their start, after a test flushed the node's ruleset. Flannel's
// new pod rewrites its conflist: it waits until the runtime's chain names
// podwire again.
func restartNodeNetworking(t *testing.T, n *cluster.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, ds := range []struct{ ns, label, name string }{
		{"kube-system", "k8s-app=kube-proxy", "kube-proxy"},
		{"kube-flannel", "app=flannel", "kube-flannel-ds"},
	} {
		out := kubectl(t, "", "-n", ds.ns, "get", "pods", "-l", ds.label, "--field-selector", "spec.nodeName="+n.Name, "-o", "name")
		for _, p := range strings.Fields(out) {
			kubectl(t, "", "-n", ds.ns, "delete", p, "--wait=true", "--timeout=90s")
		}
		kubectl(t, "", "-n", ds.ns, "rollout", "status", "ds/"+ds.name, "--timeout=120s")
	}
	if err := waitChain(ctx, n); err != nil {
		t.Error(err)
	}
}
