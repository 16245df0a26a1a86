package vlanbridge

import (
	"reflect"
	"testing"
)

func TestHostVethName(t *testing.T) {
	a := HostVethName("0123456789abcdef", "eth0")
	if len(a) != 15 {
		t.Errorf("name %q is %d bytes, want 15", a, len(a))
	}
	if a != HostVethName("0123456789abcdef", "eth0") {
		t.Error("name is not deterministic")
	}
	for _, other := range []string{HostVethName("0123456789abcdef", "eth1"), HostVethName("0123456789abcdeg", "eth0")} {
		if other == a {
			t.Errorf("different attachments share the name %q", a)
		}
	}
}

func TestRuns(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []uint16
		want [][2]uint16
	}{
		{"empty", nil, nil},
		{"one", []uint16{100}, [][2]uint16{{100, 100}}},
		{"range and single", []uint16{310, 300, 301, 302, 200}, [][2]uint16{{200, 200}, {300, 302}, {310, 310}}},
		{"duplicates", []uint16{5, 5, 6}, [][2]uint16{{5, 6}}},
	} {
		if got := Runs(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Runs(%v) = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
}
