package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

// Pods of the tests run the locally built pause image as their container
// too: no registry is reachable, and every packet of a scenario is sent and
// received by the test itself inside the pod's network namespace (found
// through the CRI from the pod's UID), so a workload image would add
// nothing but build time. The API, the scheduler, the kubelet, containerd
// and the CNI chain all do their real work.

// pod is a running pod as the test sees it.
type pod struct {
	namespace, name string
	uid             string
	ip              netip.Addr
	netns           string // /proc/PID/ns/net of its sandbox
	sandbox         string // CNI_CONTAINERID
}

// podSpec is the spec of a test pod at indent; the pause container sleeps.
func podSpec(indent string) string {
	lines := []string{"automountServiceAccountToken: false", "terminationGracePeriodSeconds: 1", "containers:",
		"- name: main", "  image: " + cluster.PauseImage, "  imagePullPolicy: Never"}
	return indent + strings.Join(lines, "\n"+indent) + "\n"
}

// annotationsYAML renders metadata annotations at indent.
func annotationsYAML(ann map[string]string, indent string) string {
	if len(ann) == 0 {
		return ""
	}
	keys := make([]string, 0, len(ann))
	for k := range ann {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := indent + "annotations:\n"
	for _, k := range keys {
		s += fmt.Sprintf("%s  %q: %q\n", indent, k, ann[k])
	}
	return s
}

func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	return c.MustKubectl(t, stdin, args...)
}

// applyPod creates a pod through the API (not waiting for it) and deletes
// it when the test ends.
func applyPod(t *testing.T, namespace, name string, ann map[string]string) {
	t.Helper()
	manifest := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\n%sspec:\n%s",
		name, namespace, annotationsYAML(ann, "  "), podSpec("  "))
	kubectl(t, manifest, "apply", "-f", "-")
	t.Cleanup(func() { deletePod(t, namespace, name) })
}

// runPod creates a pod and waits until it is Ready.
func runPod(t *testing.T, namespace, name string, ann map[string]string) *pod {
	t.Helper()
	start := time.Now()
	applyPod(t, namespace, name, ann)
	kubectl(t, "", "wait", "-n", namespace, "--for=condition=Ready", "pod/"+name, "--timeout=90s")
	p := podByName(t, namespace, name)
	t.Logf("pod %s/%s Ready in %v: %s", namespace, name, time.Since(start).Round(time.Millisecond), p.ip)
	return p
}

// podByName reads a running pod's UID and IP from the API and its netns
// from the CRI.
func podByName(t *testing.T, namespace, name string) *pod {
	t.Helper()
	out := kubectl(t, "", "get", "pod", "-n", namespace, name, "-o", "jsonpath={.metadata.uid} {.status.podIP}")
	uid, ip, _ := strings.Cut(out, " ")
	p := &pod{namespace: namespace, name: name, uid: uid}
	var err error
	if p.ip, err = netip.ParseAddr(ip); err != nil {
		t.Fatalf("pod %s/%s has no IP in the API (%q): %v", namespace, name, out, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p.netns, p.sandbox, err = n1.PodNetNS(ctx, uid); err != nil {
		t.Fatalf("pod %s/%s: %v", namespace, name, err)
	}
	return p
}

// deletePod deletes a pod through the API and waits until it is gone.
func deletePod(t *testing.T, namespace, name string) {
	t.Helper()
	kubectl(t, "", "delete", "pod", "-n", namespace, name, "--ignore-not-found", "--wait=true", "--timeout=90s")
}

// waitSandboxRemoved waits up to 2 minutes until the CRI holds no sandbox
// of p: both of containerd's DELs (StopPodSandbox, RemovePodSandbox) ran.
// The removal is the test's, as the kubelet's container GC would do it
// (cluster.CollectSandboxes): the GC runs once a minute, and a deadline on
// its schedule would test the schedule.
func waitSandboxRemoved(t *testing.T, p *pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := n1.CollectSandboxes(ctx, p.uid); err != nil {
		t.Fatal(err)
	}
	for {
		s, err := n1.Sandboxes(ctx, p.uid)
		if err == nil && len(s) == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the sandbox of %s/%s was not removed: %v %v", p.namespace, p.name, s, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkPodLeftNothing fails the test when podwire's record of p, or p's
// address in the node's ruleset (a set element), is left.
func checkPodLeftNothing(t *testing.T, p *pod) {
	t.Helper()
	if hasRecord(t, p.sandbox) {
		t.Errorf("podwire's record of %s is left", p.sandbox)
	}
	if rs := nodeRuleset(t); podIPRE(p).MatchString(rs) {
		t.Errorf("the node's ruleset still holds %s:\n%s", p.ip, rs)
	}
}

// podIPRE matches p's address as a whole word.
func podIPRE(p *pod) *regexp.Regexp { return ipRE(p.ip.String()) }

// ipRE matches the address ip as a whole word.
func ipRE(ip string) *regexp.Regexp {
	return regexp.MustCompile(`\b` + regexp.QuoteMeta(ip) + `\b`)
}

// createNamespace creates a namespace and waits for its default
// ServiceAccount; it is deleted (without waiting) when the test ends.
func createNamespace(t *testing.T, name string) {
	t.Helper()
	kubectl(t, "", "create", "namespace", name)
	t.Cleanup(func() { kubectl(t, "", "delete", "namespace", name, "--wait=false") })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.WaitServiceAccount(ctx, name); err != nil {
		t.Fatal(err)
	}
}

// records lists podwire's attachment records in stateDir (one JSON file per
// attachment, named by CNI_CONTAINERID and interface).
func records(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(stateDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names
}

// hasRecord reports whether podwire holds a record of sandbox.
func hasRecord(t *testing.T, sandbox string) bool {
	for _, r := range records(t) {
		if strings.HasPrefix(r, sandbox+"_") {
			return true
		}
	}
	return false
}

// annotationSource is where podwire's record of sandbox says the pod's
// annotations came from (runtime, agent or none).
func annotationSource(t *testing.T, sandbox string) string {
	t.Helper()
	for _, r := range records(t) {
		if !strings.HasPrefix(r, sandbox+"_") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(stateDir, r))
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			AnnotationSource string `json:"annotationSource"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatalf("record %s: %v", r, err)
		}
		return rec.AnnotationSource
	}
	t.Fatalf("no record of sandbox %s", sandbox)
	return ""
}

// nodeRuleset is `nft list ruleset` of the node netns.
func nodeRuleset(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+n1.NetNS, "--", "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset in the node netns: %v\n%s", err, out)
	}
	return string(out)
}

// podwireLog returns podwire's log on the node.
func podwireLog() string {
	b, _ := os.ReadFile(n1.Path("/var/log/podwire.log"))
	return string(b)
}
