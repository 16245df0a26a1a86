package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// TestUninstallDecide: what each answer of the API to the stopping agent's
// GET of its DaemonSet means.
func TestUninstallDecide(t *testing.T) {
	ds := func(uid string, deleting bool) *metav1.PartialObjectMetadata {
		m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "podwire-system", Name: "podwire-agent", UID: ktypes.UID(uid)}}
		if deleting {
			now := metav1.Now()
			m.DeletionTimestamp = &now
		}
		return m
	}
	gr := daemonSetsResource.GroupResource()
	for _, tc := range []struct {
		name string
		obj  *metav1.PartialObjectMetadata // nil: none
		err  error                         // the GET's answer, when set
		// seenUID and seenDeleted are what the watch saw.
		seenUID     string
		seenDeleted bool
		// synced: the watch has listed once.
		synced bool
		want   bool
		reason string
	}{
		{name: "in place", obj: ds("u1", false), seenUID: "u1", want: false, reason: "a restart or an update"},
		{name: "in place, watch not synced", obj: ds("u1", false), want: false, reason: "a restart or an update"},
		{name: "being deleted", obj: ds("u1", true), seenUID: "u1", want: true, reason: "being deleted"},
		{name: "gone", seenUID: "u1", synced: true, want: true, reason: "is gone"},
		{name: "gone, watch never saw it", synced: true, want: false, reason: "never saw it"},
		{name: "gone, watch not synced", seenUID: "u1", want: false, reason: "never saw it"},
		{name: "replaced by a reinstall", obj: ds("u2", false), seenUID: "u1", seenDeleted: true, want: false, reason: "replaced"},
		// A force-deleted agent pod's token, or an RBAC change: nothing
		// is decided without the watch's word.
		{name: "401", err: apierrors.NewUnauthorized("token invalid"), seenUID: "u1", synced: true, want: false, reason: "may not read"},
		{name: "403", err: apierrors.NewForbidden(gr, "podwire-agent", errors.New("no Role")), seenUID: "u1", synced: true, want: false, reason: "may not read"},
		{name: "403, watch saw the deletion", err: apierrors.NewForbidden(gr, "podwire-agent", errors.New("no Role")), seenUID: "u1", seenDeleted: true, want: true, reason: "watch saw"},
		{name: "no answer", err: context.DeadlineExceeded, seenUID: "u1", want: false, reason: "cannot tell"},
		{name: "no answer, watch saw the deletion", err: apierrors.NewServiceUnavailable("down"), seenUID: "u1", seenDeleted: true, want: true, reason: "watch saw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scheme := metadatafake.NewTestScheme()
			if err := metav1.AddMetaToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			var objs []runtime.Object
			if tc.obj != nil {
				objs = append(objs, tc.obj)
			}
			md := metadatafake.NewSimpleMetadataClient(scheme, objs...)
			if tc.err != nil {
				md.PrependReactor("get", "daemonsets", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			}
			u := NewUninstall(md, "podwire-system", "podwire-agent", time.Minute)
			u.watchGrace = 50 * time.Millisecond
			u.uid, u.deleted = ktypes.UID(tc.seenUID), tc.seenDeleted
			if tc.synced {
				// The watch lists the objects the fake holds.
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go u.Run(ctx)
				if !cache.WaitForCacheSync(ctx.Done(), u.informer.HasSynced) {
					t.Fatal("watch not synced")
				}
				u.mu.Lock()
				u.uid, u.deleted = ktypes.UID(tc.seenUID), tc.seenDeleted
				u.mu.Unlock()
			}
			got, reason := u.Decide(context.Background())
			if got != tc.want || !strings.Contains(reason, tc.reason) {
				t.Errorf("Decide = %v, %q; want %v, a reason with %q", got, reason, tc.want, tc.reason)
			}
		})
	}
}

// TestUninstallDecideWaitsForTheWatch: the stop comes before the watch's
// DELETED event, and the GET is refused (helm uninstall deleted the Role
// too): Decide waits for the event and decides an uninstall. The
// control: with no event within the grace, it keeps podwire.
func TestUninstallDecideWaitsForTheWatch(t *testing.T) {
	gr := daemonSetsResource.GroupResource()
	ds := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "podwire-system", Name: "podwire-agent", UID: "u1"}}
	for _, tc := range []struct {
		name  string
		event bool // the DELETED event arrives 200 ms into Decide
		want  bool
	}{
		{"event after the stop", true, true},
		{"no event (control)", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scheme := metadatafake.NewTestScheme()
			if err := metav1.AddMetaToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			md := metadatafake.NewSimpleMetadataClient(scheme)
			md.PrependReactor("get", "daemonsets", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(gr, "podwire-agent", errors.New("no Role"))
			})
			u := NewUninstall(md, "podwire-system", "podwire-agent", time.Minute)
			u.watchGrace = time.Second
			u.seen(ds, false)
			if tc.event {
				time.AfterFunc(200*time.Millisecond, func() { u.seen(ds, true) })
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			got, reason := u.Decide(ctx)
			if got != tc.want {
				t.Errorf("Decide = %v, %q; want %v", got, reason, tc.want)
			}
		})
	}
}

// TestUninstallWatchOutlivesTheStop: the agent's context ends (its
// SIGTERM) before the DaemonSet's deletion reaches the watch, and the GET
// is refused: the watch still runs, delivers the DELETED event, and Decide
// decides an uninstall.
func TestUninstallWatchOutlivesTheStop(t *testing.T) {
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ds := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "podwire-system", Name: "podwire-agent", UID: "u1"}}
	md := metadatafake.NewSimpleMetadataClient(scheme, ds)
	md.PrependReactor("get", "daemonsets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(daemonSetsResource.GroupResource(), "podwire-agent", errors.New("no Role"))
	})
	u := NewUninstall(md, "podwire-system", "podwire-agent", time.Minute)
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		u.Run(ctx)
		close(ran)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), u.informer.HasSynced) {
		t.Fatal("watch not synced")
	}
	stop() // the SIGTERM
	time.AfterFunc(200*time.Millisecond, func() {
		if err := md.Resource(daemonSetsResource).Namespace("podwire-system").Delete(context.Background(), "podwire-agent", metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	})
	dctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if got, reason := u.Decide(dctx); !got {
		t.Errorf("Decide = false, %q: the deletion after the stop was not seen", reason)
	}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Error("the watch still runs after Decide")
	}
}

func TestParseDaemonSet(t *testing.T) {
	for _, tc := range []struct {
		in       string
		ns, name string
		ok       bool
	}{
		{"podwire-system/podwire-agent", "podwire-system", "podwire-agent", true},
		{"podwire-agent", "", "", false},
		{"/podwire-agent", "", "", false},
		{"podwire-system/", "", "", false},
		{"a/b/c", "", "", false},
	} {
		ns, name, err := ParseDaemonSet(tc.in)
		if (err == nil) != tc.ok || ns != tc.ns || name != tc.name {
			t.Errorf("ParseDaemonSet(%q) = %q, %q, %v", tc.in, ns, name, err)
		}
	}
}
