package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

// startupTaint is deploy/'s --startup-taint: on the Node while podwire is
// not in the chain the runtime reads.
const startupTaint = "podwire.io/agent-not-ready"

// TestMultusThinClusterNetwork (containerd IPv4 leg): Multus's thin plugin
// (cmd/multus of scripts/multus-build.sh) as an operator configures it, its
// 00-multus.conf first in the conf dir, so that the runtime runs Multus,
// which runs the chain its clusterNetwork names. The agent follows
// clusterNetwork in each of Multus's forms to that chain: Ready and the
// node untainted when the chain holds podwire, not Ready and the startup
// taint back (the node takes no pods) when it does not. Forms: a file's
// path; a conflist's name; a NetworkAttachmentDefinition in kube-system
// whose config holds podwire, and one whose config does not; a directory
// whose first configuration lacks podwire. Under the file form and the
// NetworkAttachmentDefinition holding podwire, a pod created through the
// API is source-checked (packets): Multus ran podwire in the chain it
// resolved. Multus thick (the multi-node suite's TestMultus) writes only
// the file form (its generated configuration names the primary's path;
// with an operator's file its daemon does not start, so thin is the
// Multus that reads the other forms).
func TestMultusThinClusterNetwork(t *testing.T) {
	needCluster(t)
	if c.Runtime().IsCRIO() || c.IPv6Only() {
		t.Skip("the agent's reading of Multus's configuration does not depend on the runtime or the family: this runs on the containerd IPv4 leg")
	}
	dir := os.Getenv("PODWIRE_MULTUS")
	if dir == "" {
		t.Fatal("needs PODWIRE_MULTUS, the directory of scripts/multus-build.sh: run it with make test-k8s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	bin, err := os.ReadFile(filepath.Join(dir, "multus"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n1.CNIBinDir, "multus"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(n1.CNIBinDir, "multus")) })
	crd, err := multusCRD()
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, crd, "apply", "-f", "-")
	t.Cleanup(func() { kubectl(t, crd, "delete", "--ignore-not-found", "--wait=true", "-f", "-") })
	kubectl(t, "", "wait", "--for=condition=Established", "crd/network-attachment-definitions.k8s.cni.cncf.io", "--timeout=60s")

	multusConf := filepath.Join(n1.CNIConfDir, "00-multus.conf")
	t.Cleanup(func() {
		os.Remove(multusConf)
		if err := waitAgent(context.Background(), true); err != nil {
			t.Errorf("after 00-multus.conf was removed: %v", err)
		}
	})
	chained, err := os.ReadFile(n1.PrimaryConflist)
	if err != nil {
		t.Fatal(err)
	}
	if !podwireEntryRE.Match(chained) {
		t.Fatalf("the primary's conflist does not hold podwire:\n%s", chained)
	}
	// The directory form's directory: a subdirectory of the conf dir
	// (libcni and the runtimes read files only), holding the primary's
	// chain without podwire, as its installer writes it.
	primaryDir := filepath.Join(n1.CNIConfDir, "primary.d")
	if err := os.MkdirAll(primaryDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(primaryDir) })
	if err := os.WriteFile(filepath.Join(primaryDir, "10-ptp.conflist"), n1.PrimaryConflistBytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	applyNAD(t, "primary-chained", chained)
	applyNAD(t, "primary-unchained", n1.PrimaryConflistBytes())

	for i, form := range []struct {
		name, clusterNetwork string
		ready, pod           bool
	}{
		// Each form after the first turns the agent's state over, so that
		// each one's verdict is the agent's reading of it.
		{"a file's path", "/etc/cni/net.d/" + filepath.Base(n1.PrimaryConflist), true, true},
		{"a NetworkAttachmentDefinition whose config lacks podwire", "primary-unchained", false, false},
		{"a conflist's name", "k8s-pod-network", true, false},
		{"a directory whose first configuration lacks podwire", "/etc/cni/net.d/primary.d", false, false},
		{"a NetworkAttachmentDefinition whose config holds podwire", "primary-chained", true, true},
	} {
		conf, _ := json.Marshal(map[string]any{
			"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus",
			"kubeconfig": c.AdminKubeconfig, "clusterNetwork": form.clusterNetwork, "confDir": "/etc/cni/net.d",
			"logFile": "/var/log/multus.log", "logLevel": "verbose",
		})
		start := time.Now()
		if err := os.WriteFile(multusConf, conf, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := waitAgent(ctx, form.ready); err != nil {
			t.Fatalf("clusterNetwork %s (%q): %v\n%s", form.name, form.clusterNetwork, err, agentLog(ctx))
		}
		if err := waitRuntimeLoaded(ctx, form.clusterNetwork); err != nil {
			t.Fatal(err)
		}
		t.Logf("clusterNetwork %s (%q): agent Ready %v and the startup taint %s after %v", form.name, form.clusterNetwork,
			form.ready, map[bool]string{true: "gone", false: "back"}[form.ready], time.Since(start).Round(time.Millisecond))
		if !form.pod {
			continue
		}
		name := fmt.Sprintf("under-multus-%d", i)
		p := runPod(t, "default", name, nil)
		if genuine, passed := spoofFrom(t, p, 7050+i); !genuine || len(passed) > 0 {
			t.Fatalf("under Multus (clusterNetwork %s): genuine %v, forged passed %v; want the pod checked", form.name, genuine, passed)
		}
		if !hasRecord(t, p.sandbox) {
			t.Fatalf("under Multus (clusterNetwork %s): podwire has no record of %s", form.name, p.sandbox)
		}
		if log := multusLog(); !strings.Contains(log, "Add: default:"+name+":") {
			t.Fatalf("Multus's log has no ADD of default/%s: the runtime did not run Multus:\n%s", name, tail(log, 3000))
		}
		t.Logf("under Multus (clusterNetwork %s): pod %s source-checked, its ADD in Multus's log", form.name, p.ip)
		// Multus up to v4.3.0 runs a conflist delegate's DEL with a lossy
		// copy of its configuration (k8snetworkplumbingwg/multus-cni#1449,
		// fixed after v4.3.0 by #1521): host-local, without its ranges,
		// fails ptp's DEL and the pod never goes. The pod is deleted with
		// the runtime back on the primary's conflist.
		os.Remove(multusConf)
		if err := waitCNIConfig(ctx, true); err != nil {
			t.Fatal(err)
		}
		deletePod(t, "default", name)
	}
}

// multusLog is Multus's log on the node (its configuration's logFile).
func multusLog() string {
	b, _ := os.ReadFile(n1.Path("/var/log/multus.log"))
	return string(b)
}

// waitRuntimeLoaded waits until containerd has loaded the Multus
// configuration naming clusterNetwork (it reloads on the conf dir's
// inotify events, asynchronously): a pod created before would run the
// primary's chain directly.
func waitRuntimeLoaded(ctx context.Context, clusterNetwork string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	want, _ := json.Marshal(clusterNetwork)
	for {
		conf, err := n1.CNIConfig(ctx)
		if err == nil && strings.Contains(conf, `\"type\":\"multus\"`) && strings.Contains(conf, strings.ReplaceAll(string(want), `"`, `\"`)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd never loaded Multus's configuration with clusterNetwork %s: %v\n%s", want, err, conf)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// multusCRD is the NetworkAttachmentDefinition CRD of Multus's own
// manifest (its first document).
func multusCRD() (string, error) {
	m, err := (cluster.Multus{Image: "unused"}).Manifest()
	if err != nil {
		return "", err
	}
	for _, doc := range strings.Split(m, "\n---\n") {
		if strings.Contains(doc, "kind: CustomResourceDefinition") {
			return doc, nil
		}
	}
	return "", fmt.Errorf("Multus's manifest has no CustomResourceDefinition")
}

// applyNAD creates the NetworkAttachmentDefinition kube-system/name with
// config as its spec.config.
func applyNAD(t *testing.T, name string, config []byte) {
	t.Helper()
	obj, _ := json.Marshal(map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": name, "namespace": "kube-system"},
		"spec":     map[string]any{"config": string(config)},
	})
	kubectl(t, string(obj), "apply", "-f", "-")
}

// waitAgent waits up to a minute until the agent's pod is Ready (or not)
// and the Node carries the startup taint exactly when it is not.
func waitAgent(ctx context.Context, ready bool) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	want := map[bool]string{true: "True", false: "False"}[ready]
	for {
		got, err := c.Kubectl(ctx, "", "-n", agentNS, "get", "pods", "-l", "app.kubernetes.io/name=podwire-agent",
			"-o", `jsonpath={.items[0].status.conditions[?(@.type=="Ready")].status}`)
		taints, terr := c.Kubectl(ctx, "", "get", "node", n1.Name, "-o", "jsonpath={.spec.taints[*].key}")
		tainted := strings.Contains(taints, startupTaint)
		if err == nil && terr == nil && strings.TrimSpace(got) == want && tainted == !ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agent's Ready is %q (want %s), the Node's taints %q (startup taint wanted: %v): %v %v",
				got, want, taints, !ready, err, terr)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
