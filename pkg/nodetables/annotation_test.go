package nodetables

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// fakeNodes answers NodeAnnotations and counts the calls.
type fakeNodes struct {
	ann   map[string]string
	found bool
	err   error
	calls int
}

func (f *fakeNodes) NodeAnnotations(_ context.Context, node string) (map[string]string, bool, error) {
	f.calls++
	return f.ann, f.found, f.err
}

func TestRefreshNodeEgress(t *testing.T) {
	dir := t.TempDir()
	conf := parse(t, `{"type":"podwire","stateDir":"`+dir+`","kubeconfig":"/k","nodeName":"worker-1",
		"egress":{"ips":["198.51.100.7"],"nodeAnnotation":true}}`)
	f := &fakeNodes{found: true, ann: map[string]string{EgressAnnotation: "203.0.113.10, 2001:db8::10,2001:db8::11,10.0.0.0/8"}}
	get := func() (NodeGetter, error) { return f, nil }
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	// No cache: one GET; the annotation wins over egress.ips.
	fetched, warn, err := RefreshNodeEgress(context.Background(), conf, get, t0)
	if err != nil || !fetched || warn != "" || f.calls != 1 {
		t.Fatalf("first: fetched %v warn %q err %v calls %d", fetched, warn, err, f.calls)
	}
	env := ReadEnv(conf)
	if env.Egress4 != netip.MustParseAddr("203.0.113.10") || env.Egress6 != netip.MustParseAddr("2001:db8::10") {
		t.Fatalf("env %+v", env)
	}
	if len(env.Warnings) != 2 {
		t.Errorf("warnings %q, want the ignored second IPv6 and the CIDR", env.Warnings)
	}
	// Fresh cache: no GET.
	if fetched, _, _ := RefreshNodeEgress(context.Background(), conf, get, t0.Add(CacheTTL-time.Second)); fetched || f.calls != 1 {
		t.Fatalf("fresh cache: fetched %v calls %d", fetched, f.calls)
	}
	// Stale cache and the API down: the stale answer stays, with a warning.
	f.err = errors.New("connection refused")
	fetched, warn, err = RefreshNodeEgress(context.Background(), conf, get, t0.Add(CacheTTL))
	if err != nil || !fetched || warn == "" {
		t.Fatalf("stale cache, API down: fetched %v warn %q err %v", fetched, warn, err)
	}
	if ReadEnv(conf).Egress4 != netip.MustParseAddr("203.0.113.10") {
		t.Fatal("stale cache not used")
	}
	// Another node's cache does not count; with the API down that is error 11.
	other := *conf
	other.NodeName = "worker-2"
	_, _, err = RefreshNodeEgress(context.Background(), &other, get, t0)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater {
		t.Fatalf("no cache for the node, API down: err %v, want CNI error 11", err)
	}
	// The annotation removed: egress.ips apply again, with a warning.
	f.err, f.ann = nil, map[string]string{}
	if _, _, err := RefreshNodeEgress(context.Background(), conf, get, t0.Add(2*CacheTTL)); err != nil {
		t.Fatal(err)
	}
	env = ReadEnv(conf)
	if env.Egress4 != netip.MustParseAddr("198.51.100.7") || env.Egress6.IsValid() || len(env.Warnings) != 1 {
		t.Fatalf("annotation removed: env %+v", env)
	}
	// Off: never a call.
	off := parse(t, `{"type":"podwire","egress":{"ips":["198.51.100.7"]}}`)
	if fetched, _, err := RefreshNodeEgress(context.Background(), off, func() (NodeGetter, error) {
		t.Fatal("getter built without nodeAnnotation")
		return nil, nil
	}, t0); fetched || err != nil {
		t.Fatalf("off: fetched %v err %v", fetched, err)
	}
}
