package vlanbridge

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vrrp"
)

// TestPlan: each refusal is a CNI error 7 naming the bridge or uplink (every
// candidate when none is on the node), the uplink this node uses is
// recorded, and its MTU fills in an attachment that has none.
func TestPlan(t *testing.T) {
	missing := &MissingUplinkError{Candidates: []string{"eth1", "ens5"}, Node: "node-b"}
	for _, tc := range []struct {
		name       string
		v          state.VLANAttachment
		env        Env
		wantErr    string // "" for success
		wantUplink string
		wantMTU    int
	}{
		{"no bridge yet, no uplink", state.VLANAttachment{Bridge: "br0"}, Env{}, "", "", 0},
		{"uplink MTU", state.VLANAttachment{Bridge: "br0"}, Env{Uplink: "eth1", UplinkMTU: 9000}, "", "eth1", 9000},
		{"second candidate chosen", state.VLANAttachment{Bridge: "br0"}, Env{Uplink: "ens5", UplinkMTU: 1500}, "", "ens5", 1500},
		{"configured MTU kept", state.VLANAttachment{Bridge: "br0", MTU: 1400}, Env{Uplink: "eth1", UplinkMTU: 9000}, "", "eth1", 1400},
		{"our bridge", state.VLANAttachment{Bridge: "br0"}, Env{BridgeType: "bridge", BridgeOurs: true}, "", "", 0},
		{"foreign bridge with VLAN filtering", state.VLANAttachment{Bridge: "br0"}, Env{BridgeType: "bridge", BridgeVLANFiltering: true}, "", "", 0},
		{"name clash", state.VLANAttachment{Bridge: "br0"}, Env{NamesErr: errors.New("net1 exists")}, "name clash", "", 0},
		{"not a bridge", state.VLANAttachment{Bridge: "br0"}, Env{BridgeType: "dummy"}, `invalid bridge "br0": link is a dummy`, "", 0},
		{"foreign bridge without VLAN filtering", state.VLANAttachment{Bridge: "br0"}, Env{BridgeType: "bridge"}, `invalid bridge "br0": an existing bridge`, "", 0},
		{"uplink with an address", state.VLANAttachment{Bridge: "br0"}, Env{Uplink: "eth1", UplinkErr: errors.New("holds 192.0.2.1")}, `invalid uplink "eth1"`, "", 0},
		{"no candidate on the node", state.VLANAttachment{Bridge: "br0"}, Env{UplinkErr: missing},
			`no uplink on node "node-b": none of the uplink candidates "eth1", "ens5" is a link of the node`, "", 0},
	} {
		v := tc.v
		err := Plan(&v, tc.env)
		if tc.wantErr == "" {
			if err != nil || v.Uplink != tc.wantUplink || v.MTU != tc.wantMTU {
				t.Errorf("%s: err %v, uplink %q, MTU %d; want nil, %q, %d", tc.name, err, v.Uplink, v.MTU, tc.wantUplink, tc.wantMTU)
			}
			continue
		}
		var cerr *types.Error
		if !errors.As(err, &cerr) || cerr.Code != types.ErrInvalidNetworkConfig || !strings.Contains(cerr.Msg, tc.wantErr) {
			t.Errorf("%s: err %v, want CNI error 7 with %q", tc.name, err, tc.wantErr)
		}
	}
}

// TestChooseUplink: the first candidate that is a link wins, in the
// config's order; none is an error naming every candidate and the node; a
// failed lookup stops the choice rather than falling through to the next.
func TestChooseUplink(t *testing.T) {
	links := func(names ...string) func(string) (bool, error) {
		return func(n string) (bool, error) { return slices.Contains(names, n), nil }
	}
	for _, tc := range []struct {
		name       string
		candidates []string
		exists     func(string) (bool, error)
		want       string
		wantErr    []string
	}{
		{"one name, there", []string{"eth1"}, links("lo", "eth0", "eth1"), "eth1", nil},
		{"first there", []string{"eth1", "ens5"}, links("eth1", "ens5"), "eth1", nil},
		{"second there", []string{"eth1", "ens5"}, links("lo", "ens5"), "ens5", nil},
		{"none there", []string{"eth1", "ens5"}, links("lo", "eth0"), "",
			[]string{`node "node-b"`, `"eth1", "ens5"`, `"uplink" list`}},
		{"lookup fails", []string{"eth1", "ens5"}, func(n string) (bool, error) {
			if n == "eth1" {
				return false, errors.New("netlink: EBUSY")
			}
			return true, nil
		}, "", []string{`candidate "eth1"`, "EBUSY"}},
	} {
		got, err := ChooseUplink("node-b", tc.candidates, tc.exists)
		if tc.wantErr == nil {
			if err != nil || got != tc.want {
				t.Errorf("%s: ChooseUplink = %q, %v; want %q", tc.name, got, err, tc.want)
			}
			continue
		}
		if err == nil || got != "" {
			t.Errorf("%s: ChooseUplink = %q, %v; want an error", tc.name, got, err)
			continue
		}
		for _, s := range tc.wantErr {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not name %s", tc.name, err, s)
			}
		}
	}
}

// TestUnusedUplinkVLANs: a VLAN another record puts on the same uplink
// stays; one on another uplink, or only in the record itself, goes.
func TestUnusedUplinkVLANs(t *testing.T) {
	rec := func(id string, v *state.VLANAttachment) *state.Record {
		return &state.Record{ContainerID: id, IfName: "eth0", VLAN: v}
	}
	self := &state.VLANAttachment{Uplink: "eth1", PVID: 100, Tagged: []uint16{200, 300}}
	recs := []*state.Record{
		rec("self", self),
		rec("same uplink", &state.VLANAttachment{Uplink: "eth1", PVID: 200}),
		rec("other uplink", &state.VLANAttachment{Uplink: "eth2", Tagged: []uint16{300}}),
		rec("no VLAN", nil),
	}
	if got, want := UnusedUplinkVLANs(self, "self/eth0", recs), []uint16{300, 100}; !reflect.DeepEqual(got, want) {
		t.Errorf("UnusedUplinkVLANs = %v, want %v", got, want)
	}
	if got := UnusedUplinkVLANs(self, "self/eth0", append(recs, rec("all", &state.VLANAttachment{Uplink: "eth1", PVID: 300, Tagged: []uint16{100}}))); got != nil {
		t.Errorf("every VLAN still used: UnusedUplinkVLANs = %v, want none", got)
	}
}

// TestPortOfVRRP: the port of a VRRP pod accepts the virtual MACs of its
// groups on the pod end (a master carries one), one per address family a
// group has.
func TestPortOfVRRP(t *testing.T) {
	v := &state.VLANAttachment{Bridge: "podwire0", HostVeth: "pwv1", PodIfName: "net1", PVID: 100, MAC: "02:00:00:00:00:01",
		VRRP: []vrrp.Group{{VRID: 7, VIPs: []netip.Addr{netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("2001:db8::100")}},
			{VRID: 8, VIPs: []netip.Addr{netip.MustParseAddr("192.0.2.101")}}}}
	p := PortOf(v, "/var/run/netns/p")
	want := []string{vrrp.MAC(7, false).String(), vrrp.MAC(7, true).String(), vrrp.MAC(8, false).String()}
	var got []string
	for _, m := range p.VRRPMACs {
		got = append(got, m.String())
	}
	if !slices.Equal(got, want) || p.MAC.String() != "02:00:00:00:00:01" {
		t.Errorf("PortOf: MAC %s, VRRP MACs %v; want 02:00:00:00:00:01 and %v", p.MAC, got, want)
	}
	if p := PortOf(&state.VLANAttachment{MAC: "02:00:00:00:00:01"}, ""); len(p.VRRPMACs) != 0 {
		t.Errorf("a port without VRRP groups accepts %v", p.VRRPMACs)
	}
}
