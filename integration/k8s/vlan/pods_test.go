package vlan

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
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

// ensureNamespace creates the namespace name unless it exists.
func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + name + `"}}`)
	if b, err := api(ctx, "POST", "/api/v1/namespaces", body); err != nil && !strings.Contains(string(b), "AlreadyExists") {
		t.Fatal(err)
	}
}

// createPod creates a pod with annotations on node n through the API,
// without waiting for it, and deletes it when the test ends, without
// waiting for it to go either: it goes while the next test's pods start,
// and the tests' addresses are all different. Its one container runs the
// pause image.
func createPod(t *testing.T, namespace, name string, n *cluster.Node, annotations map[string]string) {
	t.Helper()
	createPodWith(t, namespace, name, n, annotations,
		map[string]any{"name": "main", "image": cluster.PauseImage, "imagePullPolicy": "Never"})
}

// createPodWith is createPod with container as the pod's one container.
func createPodWith(t *testing.T, namespace, name string, n *cluster.Node, annotations map[string]string, container map[string]any) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deletePod(ctx, namespace, name); err != nil {
			t.Errorf("delete %s/%s: %v", namespace, name, err)
		}
	})
	grace := int64(1)
	manifest, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": namespace, "annotations": annotations},
		"spec": map[string]any{
			"nodeName": n.Name, "automountServiceAccountToken": false, "terminationGracePeriodSeconds": grace,
			"containers": []map[string]any{container},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := api(ctx, "POST", "/api/v1/namespaces/"+namespace+"/pods", manifest)
	if err != nil && !(strings.Contains(err.Error(), "409 Conflict") && strings.Contains(string(b), "AlreadyExists")) {
		t.Fatal(err)
	}
}

// deleteAndWait deletes the pod namespace/name and waits until the API
// has it no more (its DEL ran: the kubelet removes the object after
// stopping the sandbox).
func deleteAndWait(ctx context.Context, namespace, name string) error {
	path := "/api/v1/namespaces/" + namespace + "/pods/" + name
	if err := deletePod(ctx, namespace, name); err != nil {
		return err
	}
	for {
		b, err := api(ctx, "GET", path, nil)
		if err != nil && strings.Contains(string(b), "NotFound") {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("pod %s/%s still there after its deletion: %w", namespace, name, ctx.Err())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// deletePod deletes the pod namespace/name without waiting for it to go;
// one already gone is no error.
func deletePod(ctx context.Context, namespace, name string) error {
	if b, err := api(ctx, "DELETE", "/api/v1/namespaces/"+namespace+"/pods/"+name, nil); err != nil && !strings.Contains(string(b), "NotFound") {
		return err
	}
	return nil
}

// api is cluster.API, its request sent again after an error of the
// transport until ctx ends: under TCG the apiserver sometimes takes longer
// than the client's 5 s to answer while pods start. A status outside 2xx
// is returned at once. (A POST sent again may find its object made by
// the first: 409 AlreadyExists.)
func api(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	for {
		b, err := c.API(ctx, method, path, body)
		if err == nil || b != nil || ctx.Err() != nil {
			return b, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// runPod is createPod, then waits until the pod is Ready and finds its
// netns.
func runPod(t *testing.T, namespace, name string, n *cluster.Node, annotations map[string]string) *pod {
	t.Helper()
	createPod(t, namespace, name, n, annotations)
	return readyPod(t, namespace, name, n)
}

// readyPod waits until the pod namespace/name on node n is Ready and
// finds its netns. It logs how long the wait took and, from the pod's
// status, when its sandbox and network were ready and its container
// started, counted from the pod's creation (whole seconds: the API's).
func readyPod(t *testing.T, namespace, name string, n *cluster.Node) *pod {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := waitReady(ctx, namespace, name)
	if err != nil {
		desc, _ := c.Kubectl(context.Background(), "", "-n", namespace, "describe", "pod", name)
		t.Fatalf("%v\n%s", err, desc)
	}
	p := &pod{namespace: namespace, name: name, node: n}
	if p.netns, _, err = n.PodNetNS(ctx, st.Metadata.UID); err != nil {
		t.Fatalf("pod %s/%s: %v", namespace, name, err)
	}
	took := time.Since(start)
	t.Logf("pod %s/%s on %s Ready in %.1fs (%s)", namespace, name, n.Name, took.Seconds(), st.phases())
	if took > 15*time.Second {
		logEvents(t, namespace, name)
	}
	return p
}

// logEvents logs the Events of the pod namespace/name other than the
// kubelet's Pulled, Created and Started: what delayed a slow start (a
// sandbox tried again, an image not yet known).
func logEvents(t *testing.T, namespace, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := api(ctx, "GET", "/api/v1/namespaces/"+namespace+"/events?fieldSelector=involvedObject.name%3D"+name, nil)
	if err != nil {
		t.Logf("events of %s/%s: %v", namespace, name, err)
		return
	}
	var list struct {
		Items []struct {
			cluster.PodEvent
			Count int `json:"count"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Logf("events of %s/%s: %v", namespace, name, err)
		return
	}
	for _, e := range list.Items {
		if e.Reason == "Pulled" || e.Reason == "Created" || e.Reason == "Started" {
			continue
		}
		msg := e.Message
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		t.Logf("  event of %s/%s: %s x%d from %s: %s", namespace, name, e.Reason, e.Count, e.Source.Component, msg)
	}
}

// podStatus is what readyPod reads of a pod.
type podStatus struct {
	Metadata struct {
		UID               string    `json:"uid"`
		CreationTimestamp time.Time `json:"creationTimestamp"`
	} `json:"metadata"`
	Status struct {
		Conditions []struct {
			Type, Status       string
			LastTransitionTime time.Time `json:"lastTransitionTime"`
		} `json:"conditions"`
		ContainerStatuses []struct {
			State struct {
				Running *struct {
					StartedAt time.Time `json:"startedAt"`
				} `json:"running"`
			} `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// ready reports whether the pod's Ready condition is True.
func (st *podStatus) ready() bool {
	for _, cond := range st.Status.Conditions {
		if cond.Type == "Ready" && cond.Status == "True" {
			return true
		}
	}
	return false
}

// phases says when, after the pod's creation, its sandbox and network
// were ready (PodReadyToStartContainers), its container started and it
// was Ready.
func (st *podStatus) phases() string {
	at := map[string]time.Time{}
	for _, cond := range st.Status.Conditions {
		at[cond.Type] = cond.LastTransitionTime
	}
	if cs := st.Status.ContainerStatuses; len(cs) > 0 && cs[0].State.Running != nil {
		at["started"] = cs[0].State.Running.StartedAt
	}
	var parts []string
	for _, p := range []struct{ key, what string }{{"PodReadyToStartContainers", "sandbox and network"},
		{"started", "container started"}, {"Ready", "Ready"}} {
		if t, ok := at[p.key]; ok && !t.IsZero() {
			parts = append(parts, fmt.Sprintf("%s at %.0fs", p.what, t.Sub(st.Metadata.CreationTimestamp).Seconds()))
		}
	}
	return "after creation: " + strings.Join(parts, ", ")
}

// waitReady waits until the pod namespace/name is Ready and returns its
// status.
func waitReady(ctx context.Context, namespace, name string) (*podStatus, error) {
	for {
		b, err := api(ctx, "GET", "/api/v1/namespaces/"+namespace+"/pods/"+name, nil)
		if err != nil {
			return nil, err
		}
		var st podStatus
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, err
		}
		if st.ready() {
			return &st, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pod %s/%s not Ready: %w", namespace, name, ctx.Err())
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
