package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestRequestTimeout: through client-go, a GET that hangs fails after the
// timeout while a watch streams on past it, and no request carries the
// apiserver's timeout parameter (which would end every watch after it).
func TestRequestTimeout(t *testing.T) {
	var (
		mu      sync.Mutex
		queries []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.(http.Flusher).Flush()
		select {
		case <-time.After(600 * time.Millisecond):
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, Timeout: time.Minute}
	RequestTimeout(cfg, 200*time.Millisecond)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Now()
	if _, err := cs.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{}); err == nil || time.Since(t0) > 500*time.Millisecond {
		t.Errorf("a GET hanging past the timeout: %v after %v", err, time.Since(t0))
	}
	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{TimeoutSeconds: new(int64)})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	t0 = time.Now()
	for range w.ResultChan() {
	}
	if d := time.Since(t0); d < 500*time.Millisecond {
		t.Errorf("the watch ended after %v, before its server did", d)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, q := range queries {
		if strings.Contains(q, "timeout=") {
			t.Errorf("request with the apiserver's timeout parameter: %q", q)
		}
	}
}
