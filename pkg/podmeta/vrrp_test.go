package podmeta

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/config"
)

// vrrpConf grants VLAN 100 to nf-a with VRIDs 1-20 and subnets (the
// gateway excluded), VLAN 101 to nf-a without VRRP, and keeps VLAN 300 in
// allowedVLANs, which grants no VRRP.
const vrrpConf = `{"cniVersion":"1.0.0","name":"n","type":"podwire","allowedVLANs":"300",
	"vlanGrants":[{"vlans":"100","namespaces":["nf-a"],"subnets":["192.0.2.0/24","2001:db8:100::/64"],"exclude":["192.0.2.1/32"],"vrrp":"1-20"},
	              {"vlans":"101","namespaces":["nf-a"],"subnets":["198.51.100.0/24"]}],
	"forwarding":{"namespaces":["nf-a"]}}`

// TestVRRPAnnotation: podwire.io/vrrp parses into groups and needs
// podwire.io/vlan; a bad value is CNI error 7 naming the key and value.
func TestVRRPAnnotation(t *testing.T) {
	a, err := ParseAnnotations(map[string]string{AnnotationVLAN: "100", AnnotationVRRP: "7=192.0.2.100,2001:db8:100::100;8=192.0.2.101"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.VRRP) != 2 || a.VRRP[0].String() != "7=192.0.2.100,2001:db8:100::100" || a.VRRP[1].String() != "8=192.0.2.101" {
		t.Errorf("groups %v", a.VRRP)
	}
	if a, err := ParseAnnotations(map[string]string{AnnotationVLAN: "100", AnnotationVRRP: " "}); err != nil || len(a.VRRP) != 0 {
		t.Errorf("empty value: %v %v", a, err)
	}
	for _, tc := range []struct {
		name    string
		raw     map[string]string
		mention []string
	}{
		{"no VLAN", map[string]string{AnnotationVRRP: "7=192.0.2.100"}, []string{AnnotationVLAN, "7=192.0.2.100"}},
		{"trunk only", map[string]string{AnnotationVLANTrunk: "100", AnnotationVRRP: "7=192.0.2.100"}, []string{AnnotationVLAN, "access VLAN"}},
		{"VRID 0", map[string]string{AnnotationVLAN: "100", AnnotationVRRP: "0=192.0.2.100"}, []string{"0=192.0.2.100", "out of range"}},
		{"prefix", map[string]string{AnnotationVLAN: "100", AnnotationVRRP: "7=192.0.2.100/24"}, []string{"7=192.0.2.100/24", "unicast"}},
		{"no VIP", map[string]string{AnnotationVLAN: "100", AnnotationVRRP: "7"}, []string{`"7"`, "VRID=VIP"}},
		{"VRID twice", map[string]string{AnnotationVLAN: "100", AnnotationVRRP: "7=192.0.2.100;7=192.0.2.101"}, []string{"VRID 7 appears twice"}},
	} {
		_, err := ParseAnnotations(tc.raw)
		var te *types.Error
		if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig {
			t.Errorf("%s: got %v, want CNI error 7", tc.name, err)
			continue
		}
		for _, m := range append(tc.mention, AnnotationVRRP) {
			if !strings.Contains(te.Msg, m) {
				t.Errorf("%s: %q does not mention %s", tc.name, te.Msg, m)
			}
		}
	}
}

// TestAdmitVRRP: a VRRP group only where one grant of the pod's access VLAN
// to its namespace lists the VRID and permits every virtual address.
func TestAdmitVRRP(t *testing.T) {
	c, err := config.Parse([]byte(vrrpConf))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ns string
		raw      map[string]string
		mention  []string // nil = admitted
	}{
		{"granted", "nf-a", map[string]string{AnnotationForwarding: "true", AnnotationVLAN: "100", AnnotationVRRP: "7=192.0.2.100,2001:db8:100::100"}, nil},
		{"granted, ordinary pod", "nf-a", map[string]string{AnnotationVLAN: "100", AnnotationVRRP: "20=192.0.2.120"}, nil},
		{"VRID outside the grant", "nf-a", map[string]string{AnnotationVLAN: "100", AnnotationVRRP: "21=192.0.2.100"},
			[]string{`"21=192.0.2.100"`, "vlanGrants", "VRID 21", "granted VRIDs 1-20"}},
		{"VLAN without VRRP", "nf-a", map[string]string{AnnotationVLAN: "101", AnnotationVRRP: "7=198.51.100.100"},
			[]string{`"7=198.51.100.100"`, "VRID 7", "granted VRIDs none"}},
		{"other namespace", "team-b", map[string]string{AnnotationVLAN: "101", AnnotationVRRP: "7=198.51.100.100"},
			[]string{AnnotationVLAN}}, // the VLAN itself is refused first
		{"VIP outside the subnets", "nf-a", map[string]string{AnnotationVLAN: "100", AnnotationVRRP: "7=192.0.2.100,203.0.113.100"},
			[]string{`"7=192.0.2.100,203.0.113.100"`, "subnets 192.0.2.0/24"}},
		{"VIP excluded", "nf-a", map[string]string{AnnotationVLAN: "100", AnnotationVRRP: "7=192.0.2.1"},
			[]string{`"7=192.0.2.1"`, "excluding 192.0.2.1/32"}},
		{"allowedVLANs", "nf-a", map[string]string{AnnotationVLAN: "300", AnnotationVRRP: "7=192.0.2.100"},
			[]string{`"7=192.0.2.100"`, "VRID 7", "VLAN 300"}},
	} {
		a, err := ParseAnnotations(tc.raw)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err = Admit(c, Identity{Namespace: tc.ns, Name: "p"}, a)
		checkAdmission(t, tc.name, err, tc.mention)
	}
}
