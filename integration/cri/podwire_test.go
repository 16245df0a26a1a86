package cri

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/pkg/install"
	"github.com/podwire/podwire/pkg/state"
)

// annForwarding is the annotation of a forwarding pod (docs/annotations.md).
const annForwarding = "podwire.io/forwarding"

// sysctl sets a sysctl (path under /proc/sys) in the node namespace.
func (n *node) sysctl(t *testing.T, key, value string) {
	t.Helper()
	if err := n.netns.Do(func(ns.NetNS) error {
		return os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644)
	}); err != nil {
		t.Fatalf("failed to set %s=%s in the node netns: %v", key, value, err)
	}
}

// readSysctl reads a sysctl (path under /proc/sys) in the namespace at nsPath.
func readSysctl(t *testing.T, nsPath, key string) string {
	t.Helper()
	var v []byte
	if err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		v, err = os.ReadFile(filepath.Join("/proc/sys", key))
		return err
	}); err != nil {
		t.Fatalf("failed to read %s in %s: %v", key, nsPath, err)
	}
	return strings.TrimSpace(string(v))
}

// stateDir is podwire's state dir in the test's conflist.
func (n *node) stateDir() string { return filepath.Join(n.dir, "podwire-state") }

// checkRecords checks that podwire recorded exactly the pods of want
// ("namespace/name" -> forwarding), complete, with annotations from the
// runtime (containerd's io.kubernetes.cri.pod-annotations capability).
func checkRecords(t *testing.T, n *node, want map[string]bool) {
	t.Helper()
	recs, err := state.New(n.stateDir()).List()
	if err != nil {
		t.Fatalf("failed to read podwire's records: %v", err)
	}
	got := map[string]bool{}
	for _, r := range recs {
		pod := r.PodNamespace + "/" + r.PodName
		got[pod] = true
		fwd, ok := want[pod]
		switch {
		case !ok:
			t.Errorf("unexpected podwire record for %s (container %s)", pod, r.ContainerID)
		case !r.Complete:
			t.Errorf("record of %s is not complete", pod)
		case r.AnnotationSource != "runtime":
			t.Errorf("record of %s: annotations from %q, want the runtime's capability", pod, r.AnnotationSource)
		case r.Forwarding != fwd:
			t.Errorf("record of %s: forwarding=%v, want %v", pod, r.Forwarding, fwd)
		}
	}
	for pod := range want {
		if !got[pod] {
			t.Errorf("no podwire record for %s", pod)
		}
	}
}

// checkPodForwarding checks the forwarding sysctls inside the pod.
func checkPodForwarding(t *testing.T, p *pod, want bool) {
	t.Helper()
	on := "0"
	if want {
		on = "1"
	}
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if got := readSysctl(t, p.netnsPath, key); got != on {
			t.Errorf("pod %s/%s: %s=%s, want %s", p.namespace, p.name, key, got, on)
		}
	}
}

// checkPodwireLeftovers checks that no record is left in podwire's state
// dir and that podwire's tables in the node netns hold no set element.
func checkPodwireLeftovers(t *testing.T, n *node) {
	t.Helper()
	recs, err := state.New(n.stateDir()).List()
	if err != nil {
		t.Errorf("failed to read podwire's records: %v", err)
	}
	for _, r := range recs {
		t.Errorf("podwire record of %s/%s (container %s) left", r.PodNamespace, r.PodName, r.ContainerID)
	}
	err = n.netns.Do(func(ns.NetNS) error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tables, err := c.ListTables()
		if err != nil {
			return err
		}
		for _, tb := range tables {
			if !strings.HasPrefix(tb.Name, "podwire") {
				continue
			}
			sets, err := c.GetSets(tb)
			if err != nil {
				return err
			}
			for _, s := range sets {
				elems, err := c.GetSetElements(s)
				if err != nil {
					return err
				}
				if len(elems) > 0 {
					t.Errorf("set %s of table %s still has %d elements", s.Name, tb.Name, len(elems))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("failed to read podwire's tables in the node netns: %v", err)
	}
}

// checkStatusCLI runs `podwire status --json` in the node namespace and
// checks it lists exactly the pods of want ("namespace/name" ->
// forwarding), with the source check on the others, and the node tables
// current.
func checkStatusCLI(t *testing.T, n *node, conflist string, want map[string]bool) {
	t.Helper()
	st, out, err := cnitest.RunStatus(exec.Command("nsenter", "--net="+n.netns.Path(), "--",
		filepath.Join(n.binDir, "podwire"), "status", "--conflist", conflist, "--json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Tables) == 0 {
		t.Errorf("podwire status lists no node tables")
	}
	if nc := st.NotCurrent(); len(nc) > 0 {
		t.Errorf("podwire status: tables %v not current", nc)
	}
	got := map[string]bool{}
	for _, a := range st.Attachments {
		got[a.Pod] = true
		fwd, ok := want[a.Pod]
		if !ok || a.Forwarding != fwd || a.SourceCheck == fwd || !a.Complete {
			t.Errorf("podwire status: attachment %+v, want forwarding=%v sourceCheck=%v complete", a, fwd, !fwd)
		}
	}
	for pod := range want {
		if !got[pod] {
			t.Errorf("podwire status does not list %s:\n%s", pod, out)
		}
	}
	t.Logf("podwire status: %d tables, %d attachments, warnings %q", len(st.Tables), len(st.Attachments), st.Warnings)
}

// checkUninstall runs `podwire uninstall` in the node namespace and checks
// that it reverses the install: the conflist is the primary's again, the
// binary, podwire's tables and state are gone, and a new pod gets the
// primary's network without podwire.
func checkUninstall(ctx context.Context, t *testing.T, n *node, conflist string) {
	t.Helper()
	bin := filepath.Join(n.binDir, "podwire")
	out, err := exec.Command("nsenter", "--net="+n.netns.Path(), "--",
		bin, "uninstall", "--bin-dir", n.binDir, "--conflist", conflist).CombinedOutput()
	if err != nil {
		t.Fatalf("podwire uninstall: %v\n%s", err, out)
	}
	t.Logf("podwire uninstall:\n%s", out)
	if _, err := os.Stat(bin); !os.IsNotExist(err) {
		t.Errorf("binary %s still there after uninstall: %v", bin, err)
	}
	data, err := os.ReadFile(conflist)
	if err != nil {
		t.Fatal(err)
	}
	if _, has, err := install.Entry(data); err != nil || has {
		t.Errorf("conflist still chains podwire after uninstall (err %v):\n%s", err, data)
	}
	if _, err := os.Stat(n.stateDir()); !os.IsNotExist(err) {
		t.Errorf("state dir %s still there after uninstall: %v", n.stateDir(), err)
	}
	if tables := n.podwireTables(t); len(tables) > 0 {
		t.Errorf("podwire tables left in the node netns after uninstall: %v", tables)
	}

	// containerd reloads the conf dir: a new pod gets ptp alone.
	var p *pod
	for {
		p, err = n.runPod(ctx, t, plainNS, "after-uninstall", nil)
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond) // the conf dir reload is asynchronous
	}
	if err != nil {
		t.Fatalf("RunPodSandbox after uninstall: %v", err)
	}
	checkPodIPs(t, p)
	checkConnectivity(t, n, p)
	if recs, _ := state.New(n.stateDir()).List(); len(recs) > 0 {
		t.Errorf("podwire recorded a pod after uninstall")
	}
	n.removePod(ctx, t, p)
	checkNothingLeft(ctx, t, n)
}

// podwireTables lists podwire's nftables tables in the node namespace.
func (n *node) podwireTables(t *testing.T) []string {
	t.Helper()
	var names []string
	if err := n.netns.Do(func(ns.NetNS) error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tables, err := c.ListTables()
		for _, tb := range tables {
			if strings.HasPrefix(tb.Name, "podwire") {
				names = append(names, tb.Name)
			}
		}
		return err
	}); err != nil {
		t.Fatalf("failed to list the node's tables: %v", err)
	}
	return names
}
