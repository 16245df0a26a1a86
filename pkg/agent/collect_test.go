package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/state"
)

// collectFixture is a node's records, a fake API server's pods and a
// staleCollector over them; run records what it was asked to collect.
type collectFixture struct {
	t      *testing.T
	api    *apiPods
	pods   *Pods
	store  *state.Store
	c      *staleCollector
	apiErr error // the API's answer to every LIST once set
	ran    []string
}

func pod(ns, name, uid string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: ktypes.UID(uid)}}
}

// newCollectFixture serves pods on worker-1 and, when run, syncs the
// informer before returning.
func newCollectFixture(t *testing.T, run bool, pods ...*metav1.PartialObjectMetadata) *collectFixture {
	f := &collectFixture{t: t, api: &apiPods{nodes: map[string]string{}}, store: state.New(t.TempDir())}
	for _, p := range pods {
		f.api.pods = append(f.api.pods, p)
		f.api.nodes[p.Name] = "worker-1"
	}
	client := f.api.client(t)
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if f.apiErr != nil {
			return true, nil, f.apiErr
		}
		return false, nil, nil
	})
	f.pods = NewPods(client, "worker-1", 0)
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go f.pods.Run(ctx)
		deadline := time.Now().Add(10 * time.Second)
		for !f.pods.Synced() {
			if time.Now().After(deadline) {
				t.Fatal("pod informer not synced after 10 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	f.c = &staleCollector{pods: f.pods, store: f.store, grace: collectGrace,
		run: func(_ context.Context, rec *state.Record) (*cliapi.CollectResult, error) {
			f.ran = append(f.ran, rec.Key())
			if err := f.store.Delete(rec.ContainerID, rec.IfName); err != nil {
				return nil, err
			}
			return &cliapi.CollectResult{Key: rec.Key(), Collected: true}, nil
		}}
	return f
}

// record writes the record of an attachment of pod ns/name (uid), created at created.
func (f *collectFixture) record(cid, ns, name, uid string, created time.Time) {
	f.t.Helper()
	if err := f.store.Put(&state.Record{ContainerID: cid, IfName: "eth0", PodNamespace: ns, PodName: name, PodUID: uid,
		Created: created, Complete: true}); err != nil {
		f.t.Fatal(err)
	}
}

// gone deletes pod ns/name from the informer's cache and the API, as its
// deletion does.
func (f *collectFixture) gone(ns, name string) {
	f.t.Helper()
	if obj, ok, _ := f.pods.informer.GetStore().GetByKey(ns + "/" + name); ok {
		if err := f.pods.informer.GetStore().Delete(obj); err != nil {
			f.t.Fatal(err)
		}
	}
	for i, p := range f.api.pods {
		if p.Namespace == ns && p.Name == name {
			f.api.pods = append(f.api.pods[:i], f.api.pods[i+1:]...)
			return
		}
	}
}

func (f *collectFixture) kept(cid string) bool {
	f.t.Helper()
	r, err := f.store.Get(cid, "eth0")
	if err != nil {
		f.t.Fatal(err)
	}
	return r != nil
}

// TestCollectStale: a record whose pod is gone is collected once its pod
// has been absent for the grace and the API confirms it, never before; a
// running pod's record never is.
func TestCollectStale(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	f := newCollectFixture(t, true, pod("nf-a", "router", "u-router"), pod("nf-a", "gone", "u-gone"))
	f.record("c-router", "nf-a", "router", "u-router", t0.Add(-time.Hour))
	f.record("c-gone", "nf-a", "gone", "u-gone", t0.Add(-time.Hour))
	f.gone("nf-a", "gone")

	for _, at := range []time.Duration{0, collectGrace / 2, collectGrace - time.Second} {
		if res := f.c.sync(ctx, t0.Add(at)); len(res.collected) > 0 || len(f.ran) > 0 {
			t.Fatalf("at %v, within the grace: collected %v", at, f.ran)
		}
	}
	res := f.c.sync(ctx, t0.Add(collectGrace))
	if len(res.collected) != 1 || res.collected[0].Key() != "c-gone/eth0" || len(res.errs) > 0 {
		t.Fatalf("after the grace: collected %v (ran %v), errors %v; want c-gone/eth0", res.collected, f.ran, res.errs)
	}
	if f.kept("c-gone") || !f.kept("c-router") {
		t.Errorf("after the collection: c-gone kept %v, c-router kept %v", f.kept("c-gone"), f.kept("c-router"))
	}
	for range 3 {
		f.c.sync(ctx, t0.Add(10*collectGrace))
	}
	if len(f.ran) != 1 {
		t.Errorf("collections after the stale one: %v, want only c-gone/eth0", f.ran)
	}
}

// TestCollectStaleNeverBlind: no collection with an unsynced informer,
// none while the API errs (postponed, the record whole), none of a young
// record, none when the API still has the pod (the informer lags), and the
// collection once the API answers that the pod is gone.
func TestCollectStaleNeverBlind(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()

	t.Run("unsynced informer", func(t *testing.T) {
		f := newCollectFixture(t, false)
		f.record("c-gone", "nf-a", "gone", "u-gone", t0.Add(-time.Hour))
		for _, at := range []time.Duration{0, collectGrace, 10 * collectGrace} {
			f.c.sync(ctx, t0.Add(at))
		}
		if len(f.ran) > 0 || !f.kept("c-gone") {
			t.Errorf("collected %v with the informer never synced", f.ran)
		}
	})

	t.Run("API error", func(t *testing.T) {
		f := newCollectFixture(t, true)
		f.record("c-gone", "nf-a", "gone", "u-gone", t0.Add(-time.Hour))
		f.apiErr = errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
		f.c.sync(ctx, t0)
		for _, at := range []time.Duration{collectGrace, 10 * collectGrace} {
			res := f.c.sync(ctx, t0.Add(at))
			if len(res.postponed) != 1 || len(f.ran) > 0 {
				t.Fatalf("at %v with the API down: postponed %v, collected %v; want postponed", at, res.postponed, f.ran)
			}
		}
		if !f.kept("c-gone") {
			t.Fatal("record removed while the API was down")
		}
		f.apiErr = nil
		if res := f.c.sync(ctx, t0.Add(11*collectGrace)); len(res.collected) != 1 {
			t.Errorf("once the API answers: collected %v, want c-gone/eth0", f.ran)
		}
	})

	t.Run("young record", func(t *testing.T) {
		f := newCollectFixture(t, true)
		f.record("c-new", "nf-a", "new", "u-new", t0)
		f.c.sync(ctx, t0)
		f.c.sync(ctx, t0.Add(collectGrace-time.Second))
		if len(f.ran) > 0 {
			t.Fatalf("a record younger than the grace collected: %v", f.ran)
		}
		if f.c.sync(ctx, t0.Add(collectGrace)); len(f.ran) != 1 {
			t.Errorf("the record once old enough: collected %v", f.ran)
		}
	})

	t.Run("informer lags", func(t *testing.T) {
		f := newCollectFixture(t, true)
		f.record("c-late", "nf-a", "late", "u-late", t0.Add(-time.Hour))
		// Created after the informer's list, not yet delivered by its watch.
		f.api.pods = append(f.api.pods, pod("nf-a", "late", "u-late"))
		f.api.nodes["late"] = "worker-1"
		f.c.sync(ctx, t0)
		f.c.sync(ctx, t0.Add(collectGrace))
		if len(f.ran) > 0 || !f.kept("c-late") {
			t.Errorf("collected %v while the API has the pod", f.ran)
		}
	})
}

// TestCollectStaleUIDReuse: a pod recreated under the same name (a
// StatefulSet's) has a new UID: the old pod's record is collected, the new
// one's is not.
func TestCollectStaleUIDReuse(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	f := newCollectFixture(t, true, pod("nf-a", "db-0", "u-new"))
	f.record("c-old", "nf-a", "db-0", "u-old", t0.Add(-time.Hour))
	f.record("c-new", "nf-a", "db-0", "u-new", t0.Add(-time.Hour))
	f.c.sync(ctx, t0)
	res := f.c.sync(ctx, t0.Add(collectGrace))
	if len(res.collected) != 1 || res.collected[0].Key() != "c-old/eth0" || f.kept("c-old") || !f.kept("c-new") {
		t.Errorf("collected %v; want only the old pod's c-old/eth0", f.ran)
	}
}
