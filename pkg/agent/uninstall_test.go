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
		want        bool
		reason      string
	}{
		{name: "in place", obj: ds("u1", false), seenUID: "u1", want: false, reason: "a restart or an update"},
		{name: "in place, watch not synced", obj: ds("u1", false), want: false, reason: "a restart or an update"},
		{name: "being deleted", obj: ds("u1", true), seenUID: "u1", want: true, reason: "being deleted"},
		{name: "gone", want: true, reason: "is gone"},
		{name: "replaced by a reinstall", obj: ds("u2", false), seenUID: "u1", seenDeleted: true, want: false, reason: "replaced"},
		{name: "ServiceAccount deleted", err: apierrors.NewUnauthorized("token invalid"), want: true, reason: "ServiceAccount or RBAC"},
		{name: "RBAC deleted", err: apierrors.NewForbidden(gr, "podwire-agent", errors.New("no Role")), want: true, reason: "ServiceAccount or RBAC"},
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
			u.uid, u.deleted = ktypes.UID(tc.seenUID), tc.seenDeleted
			got, reason := u.Decide(context.Background())
			if got != tc.want || !strings.Contains(reason, tc.reason) {
				t.Errorf("Decide = %v, %q; want %v, a reason with %q", got, reason, tc.want, tc.reason)
			}
		})
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
