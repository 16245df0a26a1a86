package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
)

// fakeAPI is a Kubernetes API server on the node's loopback that serves
// one pod's metadata (GET /api/v1/namespaces/NS/pods/NAME), and a kubeconfig
// pointing to it.
type fakeAPI struct {
	srv        *httptest.Server
	kubeconfig string
	uid        atomic.Value // string: the UID the API reports
	hang       atomic.Bool  // never answer (a partitioned API server)
	gets       atomic.Int32
}

func (n *node) newFakeAPI(namespace, name string, annotations map[string]string) *fakeAPI {
	n.t.Helper()
	f := &fakeAPI{}
	f.uid.Store("")
	var ln net.Listener
	n.do(func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0") // inside the node netns, where podwire runs
		return err
	})
	path := fmt.Sprintf("/api/v1/namespaces/%s/pods/%s", namespace, name)
	done := make(chan struct{})
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.gets.Add(1)
		if f.hang.Load() {
			select {
			case <-done:
			case <-r.Context().Done():
			}
			return
		}
		if r.Method != http.MethodGet || r.URL.Path != path {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
			return
		}
		if !strings.Contains(r.Header.Get("Accept"), "PartialObjectMetadata") {
			http.Error(w, "metadata-only GET expected, Accept: "+r.Header.Get("Accept"), http.StatusNotAcceptable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
			"metadata": map[string]any{"name": name, "namespace": namespace, "uid": f.uid.Load(), "annotations": annotations},
		})
	}))
	f.srv.Listener = ln
	f.srv.Start()
	n.t.Cleanup(func() { close(done); f.srv.Close() })
	f.kubeconfig = filepath.Join(n.dir, "podwire.kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {server: %q}
users:
- name: podwire
  user: {token: test-token}
contexts:
- name: fake
  context: {cluster: fake, user: podwire}
current-context: fake
`, f.srv.URL)
	if err := os.WriteFile(f.kubeconfig, []byte(kc), 0o600); err != nil {
		n.t.Fatal(err)
	}
	return f
}

// addPodUID runs ADD for a pod named name in namespace with the given UID
// in CNI_ARGS and no annotations capability (an old runtime), so podwire
// falls back to the API.
func (n *node) addPodUID(namespace, name, uid string, conf map[string]any) (*pod, error) {
	return n.addPod(podSpec{version: "1.1.0", namespace: namespace, name: name, uid: uid, noCapability: true, podwire: conf})
}

// TestAPIFallback: without the runtime's annotations capability podwire
// GETs the pod's metadata from the API (kubeconfig), refuses a pod whose UID
// differs, and answers CNI error 11 within its timeout when the API cannot
// answer; nothing is left behind on refusal.
func TestAPIFallback(t *testing.T) {
	n := newNode(t)
	const uid = "6f1c2a52-0000-4000-8000-000000000001"
	api := n.newFakeAPI("nf-api", "router", map[string]string{"podwire.io/forwarding": "true"})
	conf := map[string]any{"kubeconfig": api.kubeconfig}
	for k, v := range fwdConfig {
		conf[k] = v
	}

	api.uid.Store(uid)
	p, err := n.addPodUID("nf-api", "router", uid, conf)
	if err != nil {
		t.Fatalf("ADD with annotations from the API: %v\nlog:\n%s", err, n.log())
	}
	if api.gets.Load() != 1 {
		t.Errorf("API GETs = %d, want 1", api.gets.Load())
	}
	var fwd string
	if err := p.ns.Do(func(ns.NetNS) error { fwd, err = sysctl.Sysctl("net.ipv4.ip_forward"); return err }); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(fwd) != "1" || !strings.Contains(n.log(), "annotations=api") {
		t.Fatalf("forwarding annotation from the API not applied: ip_forward=%s\nlog:\n%s", fwd, n.log())
	}
	if err := p.del(); err != nil {
		t.Fatal(err)
	}

	api.uid.Store("6f1c2a52-0000-4000-8000-00000000dead")
	_, err = n.addPodUID("nf-api", "router", uid, conf)
	if err == nil || !strings.Contains(err.Error(), "UID") {
		t.Fatalf("ADD with a UID mismatch: err = %v, want a refusal naming the UID", err)
	}
	if recs := n.records(); len(recs) != 0 {
		t.Fatalf("records left after refusal: %v", recs)
	}

	api.hang.Store(true)
	start := time.Now()
	_, err = n.addPodUID("nf-api", "router", uid, conf)
	took := time.Since(start)
	t.Logf("hanging API: %v after %v", err, took)
	if cniCode(err) != 11 || took > 15*time.Second {
		t.Fatalf("ADD with a hanging API: err = %v (code %d) after %v, want code 11 within the timeout", err, cniCode(err), took)
	}
	api.srv.Close()
	start = time.Now()
	_, err = n.addPodUID("nf-api", "router", uid, conf)
	t.Logf("API down: %v after %v", err, time.Since(start))
	if cniCode(err) != 11 {
		t.Fatalf("ADD with the API down: err = %v (code %d), want 11", err, cniCode(err))
	}
	if recs := n.records(); len(recs) != 0 {
		t.Fatalf("records left after refusal: %v", recs)
	}
}
