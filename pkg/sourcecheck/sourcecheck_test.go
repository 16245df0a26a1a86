package sourcecheck

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"

	"github.com/podwire/podwire/pkg/nft"
)

func TestOutermost(t *testing.T) {
	pp := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		in, want []netip.Prefix
	}{
		{"none", nil, nil},
		{"disjoint", pp("10.0.0.0/8", "192.168.0.0/16"), pp("10.0.0.0/8", "192.168.0.0/16")},
		{"inner dropped", pp("10.1.0.0/16", "10.0.0.0/8"), pp("10.0.0.0/8")},
		{"duplicate", pp("10.0.0.0/8", "10.0.0.0/8"), pp("10.0.0.0/8")},
		{"families apart", pp("::/0", "10.0.0.0/8", "2001:db8::/32"), pp("::/0", "10.0.0.0/8")},
	} {
		if got := Outermost(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Outermost(%v) = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestElements(t *testing.T) {
	e := Elements(Pod{
		HostIfName:      "veth1",
		Addresses:       []netip.Addr{netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("fd00::2")},
		AllowedPrefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")},
		Name:            "ns/pod",
	})
	sets := e[ID]
	if len(sets[SetChecked]) != 1 || len(sets[setPodV4]) != 1 || len(sets[setPodV6]) != 1 || len(sets[setAllowV4]) != 1 || len(sets[setAllowV6]) != 0 {
		t.Fatalf("elements per set: %v", sets)
	}
	ifk := nft.IfNameKey("veth1")
	if k := sets[setPodV4][0].Key; len(k) != 20 || !bytes.Equal(k[:16], ifk) || !bytes.Equal(k[16:], []byte{10, 244, 1, 2}) {
		t.Errorf("pod-v4 key %x", k)
	}
	if k := sets[setPodV6][0].Key; len(k) != 32 {
		t.Errorf("pod-v6 key %x: want 32 bytes", k)
	}
	a := sets[setAllowV4][0]
	if !bytes.Equal(a.Key[16:], []byte{10, 99, 0, 0}) || !bytes.Equal(a.KeyEnd[16:], []byte{10, 99, 0, 255}) {
		t.Errorf("allowed-v4 range %x-%x", a.Key, a.KeyEnd)
	}
	if sets[SetChecked][0].Comment != "ns/pod" {
		t.Errorf("comment %q", sets[SetChecked][0].Comment)
	}
}

func TestTableHashStable(t *testing.T) {
	if Table().Hash() != Table().Hash() {
		t.Fatal("hash of the same description differs")
	}
	if err := Table().Validate(); err != nil {
		t.Fatal(err)
	}
}
