package podmeta

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/config"
)

func TestIdentityFromArgs(t *testing.T) {
	for _, tc := range []struct{ args, ns, name, uid string }{
		{"IgnoreUnknown=1;K8S_POD_NAMESPACE=nf-a;K8S_POD_NAME=r1;K8S_POD_UID=u1", "nf-a", "r1", "u1"},
		{"K8S_POD_UID=u2;K8S_POD_NAME=r2;IgnoreUnknown=true;K8S_POD_NAMESPACE=default;FOO=bar", "default", "r2", "u2"},
		{"K8S_POD_NAME=p;K8S_POD_NAMESPACE=x;K8S_POD_INFRA_CONTAINER_ID=abc", "x", "p", ""},
		{"", "", "", ""},
	} {
		id, err := IdentityFromArgs(tc.args)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if id.Namespace != tc.ns || id.Name != tc.name || id.UID != tc.uid {
			t.Errorf("%q: got %+v", tc.args, id)
		}
	}
	if _, err := IdentityFromArgs("K8S_POD_NAME"); err == nil {
		t.Error("malformed CNI_ARGS accepted")
	}
}

func TestRuntimeAnnotations(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		sent bool
		n    int
		bad  bool
	}{
		{"", false, 0, false},
		{"null", true, 0, false},
		{`{}`, true, 0, false},
		{`{"podwire.io/forwarding":"true","a":"b"}`, true, 2, false},
		{`{"a":1}`, true, 0, true},
		{`["a"]`, true, 0, true},
	} {
		ann, sent, err := RuntimeAnnotations(json.RawMessage(tc.raw))
		if (err != nil) != tc.bad || sent != tc.sent || len(ann) != tc.n {
			t.Errorf("%q: ann %v sent %v err %v", tc.raw, ann, sent, err)
		}
	}
}

func TestParseAnnotations(t *testing.T) {
	a, err := ParseAnnotations(map[string]string{
		AnnotationForwarding:      "True",
		AnnotationAllowedPrefixes: `["10.0.0.0/8", "2001:db8::/32"]`,
		AnnotationRoutes:          "198.51.100.0/24, 2001:db8:1::/48",
		AnnotationVLAN:            "100",
		AnnotationVLANTrunk:       "200,300-310",
		AnnotationVLANIfName:      "vlan0",
		AnnotationVLANIPs:         "192.0.2.10/24,2001:db8::10/64",
		"other.io/x":              strings.Repeat("x", 1<<20),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Forwarding || len(a.AllowedSourcePrefixes) != 2 || len(a.Routes) != 2 || a.VLAN != 100 ||
		len(a.VLANTrunk) != 12 || a.VLANIfName != "vlan0" || !a.WantsVLAN() {
		t.Errorf("parsed %+v", a)
	}
	if a.VLANIPs[0] != netip.MustParsePrefix("192.0.2.10/24") {
		t.Errorf("vlan-ips keep host bits: %v", a.VLANIPs)
	}
	empty, err := ParseAnnotations(nil)
	if err != nil || empty.Forwarding || empty.WantsVLAN() {
		t.Errorf("nil annotations: %+v %v", empty, err)
	}
}

func TestParseAnnotationsInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		key  string
	}{
		{"forwarding yes", map[string]string{AnnotationForwarding: "yes"}, AnnotationForwarding},
		{"prefix is address", map[string]string{AnnotationAllowedPrefixes: "10.0.0.1"}, AnnotationAllowedPrefixes},
		{"prefix host bits", map[string]string{AnnotationAllowedPrefixes: "10.0.0.1/8"}, AnnotationAllowedPrefixes},
		{"prefix bad JSON", map[string]string{AnnotationAllowedPrefixes: `["10.0.0.0/8"`}, AnnotationAllowedPrefixes},
		{"routes empty item", map[string]string{AnnotationRoutes: "10.0.0.0/8,,"}, AnnotationRoutes},
		{"routes garbage", map[string]string{AnnotationRoutes: "ten/8"}, AnnotationRoutes},
		{"vlan 0", map[string]string{AnnotationVLAN: "0"}, AnnotationVLAN},
		{"vlan 4095", map[string]string{AnnotationVLAN: "4095"}, AnnotationVLAN},
		{"vlan text", map[string]string{AnnotationVLAN: "hundred"}, AnnotationVLAN},
		{"trunk reversed", map[string]string{AnnotationVLANTrunk: "310-300"}, AnnotationVLANTrunk},
		{"ifname too long", map[string]string{AnnotationVLAN: "100", AnnotationVLANIfName: "averyverylongifname"}, AnnotationVLANIfName},
		{"ifname slash", map[string]string{AnnotationVLAN: "100", AnnotationVLANIfName: "a/b"}, AnnotationVLANIfName},
		{"vlan-ips no length", map[string]string{AnnotationVLAN: "100", AnnotationVLANIPs: "192.0.2.10"}, AnnotationVLANIPs},
		{"vlan-ips without vlan", map[string]string{AnnotationVLANIPs: "192.0.2.10/24"}, AnnotationVLANIPs},
		{"vlan-ifname without vlan", map[string]string{AnnotationVLANIfName: "net9"}, AnnotationVLANIfName},
		{"1 MiB value", map[string]string{AnnotationRoutes: strings.Repeat("1", 1<<20)}, AnnotationRoutes},
		{"too many items", map[string]string{AnnotationRoutes: strings.Repeat("10.0.0.0/8,", 100) + "10.0.0.0/8"}, AnnotationRoutes},
	} {
		_, err := ParseAnnotations(tc.ann)
		var te *types.Error
		if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig {
			t.Errorf("%s: err = %v, want CNI error 7", tc.name, err)
			continue
		}
		if !strings.Contains(te.Msg, tc.key) {
			t.Errorf("%s: message %q does not name %s", tc.name, te.Msg, tc.key)
		}
		if len(te.Msg) > 400 {
			t.Errorf("%s: message of %d bytes echoes too much input", tc.name, len(te.Msg))
		}
	}
}

func TestAdmit(t *testing.T) {
	c, err := config.Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"podwire","allowedVLANs":"100-199",
		"forwarding":{"namespaces":["nf-*","edge"],"routablePrefixes":["198.51.100.0/24","2001:db8:100::/48"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name string
		ns   string
		a    Annotations
		key  string // "" = admitted
	}{
		{"ordinary anywhere", "default", Annotations{}, ""},
		{"forwarding in nf-a", "nf-a", Annotations{Forwarding: true}, ""},
		{"forwarding in edge", "edge", Annotations{Forwarding: true}, ""},
		{"forwarding in default", "default", Annotations{Forwarding: true}, "forwarding.namespaces"},
		{"prefixes in default", "default", Annotations{AllowedSourcePrefixes: []netip.Prefix{p("10.0.0.0/8")}}, AnnotationAllowedPrefixes},
		{"routes inside", "nf-a", Annotations{Forwarding: true, Routes: []netip.Prefix{p("198.51.100.128/25"), p("2001:db8:100:1::/64")}}, ""},
		{"routes equal", "nf-a", Annotations{Routes: []netip.Prefix{p("198.51.100.0/24")}}, ""},
		{"routes wider", "nf-a", Annotations{Routes: []netip.Prefix{p("198.51.0.0/16")}}, "forwarding.routablePrefixes"},
		{"routes outside", "nf-a", Annotations{Routes: []netip.Prefix{p("203.0.113.0/24")}}, AnnotationRoutes},
		{"routes in default", "default", Annotations{Routes: []netip.Prefix{p("198.51.100.0/24")}}, AnnotationRoutes},
		{"vlan allowed", "default", Annotations{VLAN: 150}, ""},
		{"vlan refused", "default", Annotations{VLAN: 200}, "allowedVLANs"},
		{"trunk partly refused", "default", Annotations{VLANTrunk: []uint16{150, 250}}, AnnotationVLANTrunk},
		{"unknown namespace", "", Annotations{Forwarding: true}, AnnotationForwarding},
	} {
		err := Admit(c, Identity{Namespace: tc.ns, Name: "p"}, &tc.a)
		switch {
		case tc.key == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.key != "" && err == nil:
			t.Errorf("%s: admitted", tc.name)
		case tc.key != "" && !strings.Contains(err.Error(), tc.key):
			t.Errorf("%s: %q does not name %s", tc.name, err, tc.key)
		}
	}
}

type fakeFetcher struct {
	ann   map[string]string
	calls int
}

func (f *fakeFetcher) PodAnnotations(context.Context, Identity) (map[string]string, error) {
	f.calls++
	return f.ann, nil
}

func TestResolve(t *testing.T) {
	f := &fakeFetcher{ann: map[string]string{AnnotationForwarding: "true"}}
	id := Identity{Namespace: "nf", Name: "p"}
	if _, src, _ := Resolve(context.Background(), json.RawMessage("null"), id, f); src != SourceRuntime || f.calls != 0 {
		t.Errorf("null capability: source %s, %d API calls", src, f.calls)
	}
	if ann, src, _ := Resolve(context.Background(), nil, id, f); src != SourceAgent || f.calls != 1 || ann[AnnotationForwarding] != "true" {
		t.Errorf("no capability: source %s, %d API calls", src, f.calls)
	}
	if _, src, _ := Resolve(context.Background(), nil, Identity{}, f); src != SourceNone || f.calls != 1 {
		t.Errorf("unknown pod: source %s", src)
	}
	if _, src, _ := Resolve(context.Background(), nil, id, nil); src != SourceNone {
		t.Errorf("no fetcher: source %s", src)
	}
}

func FuzzParseAnnotations(f *testing.F) {
	f.Add("true", "10.0.0.0/8", "198.51.100.0/24", "100", "200,300-310", "net1", "192.0.2.10/24")
	f.Add("false", `["2001:db8::/32"]`, "", "4094", "1-4094", "x", "2001:db8::1/64")
	f.Add("", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, fwd, prefixes, routes, vid, trunk, ifname, ips string) {
		raw := map[string]string{
			AnnotationForwarding: fwd, AnnotationAllowedPrefixes: prefixes, AnnotationRoutes: routes,
			AnnotationVLAN: vid, AnnotationVLANTrunk: trunk, AnnotationVLANIfName: ifname, AnnotationVLANIPs: ips,
		}
		a, err := ParseAnnotations(raw)
		if err != nil {
			var te *types.Error
			if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig || !strings.Contains(te.Msg, "podwire.io/") {
				t.Fatalf("error %v is not a CNI error 7 naming an annotation", err)
			}
			return
		}
		if a.VLAN > 4094 || len(a.Routes) > MaxListItems || (a.VLANIfName != "" && config.ValidateIfName(a.VLANIfName) != nil) {
			t.Fatalf("accepted out-of-range values: %+v", a)
		}
		for _, p := range append(a.Routes, a.AllowedSourcePrefixes...) {
			if p.Masked() != p {
				t.Fatalf("accepted a prefix with host bits: %v", p)
			}
		}
	})
}

// TestIdentityFromArgsBoundedMessage: a huge malformed CNI_ARGS is refused
// with code 4 in a message that does not repeat all of it.
func TestIdentityFromArgsBoundedMessage(t *testing.T) {
	_, err := IdentityFromArgs("K8S_POD_NAME=" + strings.Repeat("x=", 32<<10))
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrInvalidEnvironmentVariables {
		t.Fatalf("want CNI error 4, got %v", err)
	}
	if n := len(err.Error()); n > 1000 || !strings.Contains(err.Error(), "CNI_ARGS") {
		t.Errorf("message of %d bytes (want <= 1000, naming CNI_ARGS): %.200s", n, err)
	}
}
