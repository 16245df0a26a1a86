package podmeta

import (
	"reflect"
	"testing"
)

// TestMultusAttachments: the interface names Multus gives a pod's
// networks, in both forms of its annotation, as multus-cni v4 names them.
func TestMultusAttachments(t *testing.T) {
	for _, tc := range []struct {
		v       string
		want    []MultusAttachment
		wantErr bool
	}{
		{v: "macvlan-a", want: []MultusAttachment{{"macvlan-a", "net1"}}},
		{v: "nf/macvlan-a, nf/bridge-b@data0 ,c", want: []MultusAttachment{
			{"nf/macvlan-a", "net1"}, {"nf/bridge-b", "data0"}, {"c", "net3"}}},
		{v: `[{"name":"a","namespace":"nf"},{"name":"b","interface":"net1"}]`, want: []MultusAttachment{
			{"nf/a", "net1"}, {"b", "net1"}}},
		{v: `[{"name":"a"`, wantErr: true},
		{v: "nf/a/b", wantErr: true},
		{v: "a@b@c", wantErr: true},
		{v: "nf/", wantErr: true},
	} {
		got, err := MultusAttachments(tc.v)
		if (err != nil) != tc.wantErr || !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("MultusAttachments(%q) = %v, %v; want %v (error %v)", tc.v, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestMultusAnnotationNeverRefuses: a Multus annotation Multus itself would
// refuse is no attachment for podwire, never an error of podwire's.
func TestMultusAnnotationNeverRefuses(t *testing.T) {
	a, err := ParseAnnotations(map[string]string{AnnotationMultusNetworks: "a@b@c", AnnotationVLAN: "100"})
	if err != nil || a.Multus != nil || a.VLAN != 100 {
		t.Fatalf("got %+v, %v", a, err)
	}
	a, err = ParseAnnotations(map[string]string{AnnotationMultusNetworks: "nf/a"})
	if err != nil || len(a.Multus) != 1 || a.Multus[0].Interface != "net1" {
		t.Fatalf("got %+v, %v", a, err)
	}
}
