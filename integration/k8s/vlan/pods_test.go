package vlan

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// Pods of the tests run the pause image (imported on every node): every
// packet of a scenario is sent and received by the test itself inside the
// pod's network namespace, found through the node's CRI from the pod's
// UID.

// pod is a running pod as the test sees it.
type pod struct {
	namespace, name string
	node            *cluster.Node
	netns           string // /proc/PID/ns/net of its sandbox
}

// ensureNamespace creates namespace ns once.
func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	out := c.MustKubectl(t, "", "create", "namespace", name, "--dry-run=client", "-o", "yaml")
	c.MustKubectl(t, out, "apply", "-f", "-")
}

// runPod creates a pod with annotations on node n through the API, waits
// until it is Ready (each pod start is about 10 s under TCG) and deletes
// it when the test ends.
func runPod(t *testing.T, namespace, name string, n *cluster.Node, annotations map[string]string) *pod {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		c.MustKubectl(t, "", "delete", "pod", "-n", namespace, name, "--ignore-not-found", "--wait=true", "--timeout=90s")
	})
	grace := int64(1)
	manifest, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": namespace, "annotations": annotations},
		"spec": map[string]any{
			"nodeName": n.Name, "automountServiceAccountToken": false, "terminationGracePeriodSeconds": grace,
			"containers": []map[string]any{{"name": "main", "image": cluster.PauseImage, "imagePullPolicy": "Never"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.API(ctx, "POST", "/api/v1/namespaces/"+namespace+"/pods", manifest); err != nil {
		t.Fatal(err)
	}
	uid, err := waitReady(ctx, namespace, name)
	if err != nil {
		desc, _ := c.Kubectl(context.Background(), "", "-n", namespace, "describe", "pod", name)
		t.Fatalf("%v\n%s", err, desc)
	}
	p := &pod{namespace: namespace, name: name, node: n}
	if p.netns, _, err = n.PodNetNS(ctx, uid); err != nil {
		t.Fatalf("pod %s/%s: %v", namespace, name, err)
	}
	t.Logf("pod %s/%s on %s Ready in %.1fs", namespace, name, n.Name, time.Since(start).Seconds())
	return p
}

// waitReady waits until the pod namespace/name is Ready and returns its
// UID.
func waitReady(ctx context.Context, namespace, name string) (string, error) {
	var obj struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	for {
		b, err := c.API(ctx, "GET", "/api/v1/namespaces/"+namespace+"/pods/"+name, nil)
		if err != nil {
			return "", err
		}
		if err := json.Unmarshal(b, &obj); err != nil {
			return "", err
		}
		for _, cond := range obj.Status.Conditions {
			if cond.Type == "Ready" && cond.Status == "True" {
				return obj.Metadata.UID, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("pod %s/%s not Ready: %w", namespace, name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// vlanPod is the annotations of an access port on vid holding addr.
func vlanPod(vid int, addr netip.Addr) map[string]string {
	return map[string]string{"podwire.io/vlan": fmt.Sprint(vid),
		"podwire.io/vlan-ips": netip.PrefixFrom(addr, vlanSubnet.Bits()).String()}
}

// echoPort is the UDP port of the tests' echo servers.
const echoPort = 7000

// reaches fails t unless a datagram from the netns at from to dst is
// echoed within 20 s (neighbours settle first).
func reaches(t *testing.T, what, from string, dst netip.Addr) {
	t.Helper()
	if _, err := packets.Exchange(from, netip.AddrPortFrom(dst, echoPort), 20*time.Second); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// reachesNot fails t when a datagram from the netns at from to dst is
// echoed within 3 s.
func reachesNot(t *testing.T, what, from string, dst netip.Addr) {
	t.Helper()
	if src, err := packets.Exchange(from, netip.AddrPortFrom(dst, echoPort), 3*time.Second); err == nil {
		t.Errorf("%s: answered (the echoer saw %s)", what, src)
	}
}
