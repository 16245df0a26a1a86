package vlanbridge

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vrrp"
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

func TestPortElements(t *testing.T) {
	ips := []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("2001:db8::10/64")}
	port := func(mac string, ips []netip.Prefix, tagged []uint16, groups ...vrrp.Group) *state.VLANAttachment {
		return &state.VLANAttachment{HostVeth: "pwv0123456789ab", MAC: mac, IPs: ips, Tagged: tagged, PortCheck: true, VRRP: groups}
	}
	e := PortElements(port("02:00:00:00:00:01", ips, nil), "default/pod")
	sets := e[PortCheckID]
	for set, want := range map[string]int{sourcecheck.SetChecked: 16, setPortMAC: 24, setPortV4: 20, setPortV6: 32} {
		if len(sets[set]) != 1 {
			t.Errorf("set %s has %d elements, want 1", set, len(sets[set]))
			continue
		}
		if got := len(sets[set][0].Key); got != want {
			t.Errorf("set %s key is %d bytes, want %d", set, got, want)
		}
	}
	if e := PortElements(port("", nil, nil), "x"); len(e[PortCheckID][setPortMAC]) != 0 || len(e[PortCheckID][sourcecheck.SetChecked]) != 1 {
		t.Errorf("no MAC: got %v, want the checked element only", e)
	}
	trunk := PortElements(port("02:00:00:00:00:01", ips, []uint16{200}), "x")[PortCheckID]
	if len(trunk[setMACOnly]) != 1 || len(trunk[setPortMAC]) != 1 || len(trunk[setPortV4]) != 0 {
		t.Errorf("trunk port: got %v, want checked, MAC and mac-only elements and no addresses", trunk)
	}
	if h1, h2 := PortCheckTable([]string{"eth1"}).Hash(), PortCheckTable([]string{"eth1"}).Hash(); h1 != h2 {
		t.Errorf("table hash is not stable: %s != %s", h1, h2)
	}

	// VRRP: the virtual MACs on any port; the virtual addresses join a
	// checked port's own, once each.
	a := netip.MustParseAddr
	g7 := vrrp.Group{VRID: 7, VIPs: []netip.Addr{a("192.0.2.100"), a("2001:db8::100")}}
	g8 := vrrp.Group{VRID: 8, VIPs: []netip.Addr{a("192.0.2.10")}} // also the pod's own address
	checked := PortElements(port("02:00:00:00:00:01", ips, nil, g7, g8), "x")[PortCheckID]
	if len(checked[setVRRPMAC]) != 3 || len(checked[setPortV4]) != 2 || len(checked[setPortV6]) != 2 {
		t.Errorf("checked VRRP port: got %v, want 3 virtual MACs, 2+2 addresses", checked)
	}
	fwd := port("02:00:00:00:00:01", nil, nil, g7)
	fwd.PortCheck = false
	if got := PortElements(fwd, "x")[PortCheckID]; len(got) != 1 || len(got[setVRRPMAC]) != 2 {
		t.Errorf("unchecked VRRP port: got %v, want its 2 virtual MACs only", got)
	}
	fwd.VRRP = nil
	if got := PortElements(fwd, "x"); len(got) != 0 {
		t.Errorf("unchecked port: got %v, want no elements", got)
	}
}

func TestPodMAC(t *testing.T) {
	m := PodMAC("0123456789abcdef", "eth0")
	if len(m) != 6 || m[0] != 0x02 {
		t.Errorf("PodMAC = %s, want a locally administered unicast MAC", m)
	}
	if m.String() != PodMAC("0123456789abcdef", "eth0").String() || m.String() == PodMAC("0123456789abcdef", "eth1").String() {
		t.Error("PodMAC is not deterministic per attachment")
	}
}
