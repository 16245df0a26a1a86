package vlanbridge

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/state"
)

// TestPlan: each refusal is a CNI error 7 naming the bridge or uplink, and
// the uplink's MTU fills in an attachment that has none.
func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v       state.VLANAttachment
		env     Env
		wantErr string // "" for success
		wantMTU int
	}{
		{"no bridge yet, no uplink", state.VLANAttachment{Bridge: "br0"}, Env{}, "", 0},
		{"uplink MTU", state.VLANAttachment{Bridge: "br0", Uplink: "eth1"}, Env{UplinkMTU: 9000}, "", 9000},
		{"configured MTU kept", state.VLANAttachment{Bridge: "br0", Uplink: "eth1", MTU: 1400}, Env{UplinkMTU: 9000}, "", 1400},
		{"our bridge", state.VLANAttachment{Bridge: "br0"}, Env{BridgeType: "bridge", BridgeOurs: true}, "", 0},
		{"foreign bridge with VLAN filtering", state.VLANAttachment{Bridge: "br0"}, Env{BridgeType: "bridge", BridgeVLANFiltering: true}, "", 0},
		{"name clash", state.VLANAttachment{Bridge: "br0"}, Env{NamesErr: errors.New("net1 exists")}, "name clash", 0},
		{"not a bridge", state.VLANAttachment{Bridge: "br0"}, Env{BridgeType: "dummy"}, `invalid bridge "br0": link is a dummy`, 0},
		{"foreign bridge without VLAN filtering", state.VLANAttachment{Bridge: "br0"}, Env{BridgeType: "bridge"}, `invalid bridge "br0": an existing bridge`, 0},
		{"uplink with an address", state.VLANAttachment{Bridge: "br0", Uplink: "eth1"}, Env{UplinkErr: errors.New("holds 192.0.2.1")}, `invalid uplink "eth1"`, 0},
		{"no uplink: its error is not read", state.VLANAttachment{Bridge: "br0"}, Env{UplinkErr: errors.New("x")}, "", 0},
	} {
		v := tc.v
		err := Plan(&v, tc.env)
		if tc.wantErr == "" {
			if err != nil || v.MTU != tc.wantMTU {
				t.Errorf("%s: err %v, MTU %d; want nil, %d", tc.name, err, v.MTU, tc.wantMTU)
			}
			continue
		}
		var cerr *types.Error
		if !errors.As(err, &cerr) || cerr.Code != types.ErrInvalidNetworkConfig || !strings.Contains(cerr.Msg, tc.wantErr) {
			t.Errorf("%s: err %v, want CNI error 7 with %q", tc.name, err, tc.wantErr)
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
