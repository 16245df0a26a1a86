package main

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/primary"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// planFor is the plan input of a pod on a node described by env, for the
// config entry conf (JSON without prevResult) and annotations ann.
func planFor(t *testing.T, conf string, ann map[string]string, env nodeEnv) *planInput {
	t.Helper()
	c, err := config.Parse([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	a, err := podmeta.ParseAnnotations(ann)
	if err != nil {
		t.Fatal(err)
	}
	if env.primary == nil && env.primaryErr == nil {
		env.primary = &primary.Attachment{HostIfName: "veth1", Addresses: []netip.Addr{netip.MustParseAddr("10.199.0.5")}}
	}
	env.tables.Egress4 = c.EgressV4
	return &planInput{conf: c, containerID: "c1", ifName: "eth0", netns: "/var/run/netns/p1",
		pod: podmeta.Identity{Namespace: "nf-a", Name: "p1"}, ann: a, source: podmeta.SourceRuntime,
		env: env, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

const planConf = `{"cniVersion":"1.0.0","name":"n","type":"podwire","allowedVLANs":"100-199",
	"forwarding":{"namespaces":["nf-*"],"routablePrefixes":["198.51.100.0/24"]},"egress":{"ips":["203.0.113.10"]}}`

// TestPlanAttachment: the plan is a value computed from its input alone:
// the record, the tables and the pod's elements, or a refusal naming why.
func TestPlanAttachment(t *testing.T) {
	fwd := map[string]string{"podwire.io/forwarding": "true", "podwire.io/routes": "198.51.100.0/25"}
	vlan := map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "192.0.2.10/24"}
	for _, tc := range []struct {
		name    string
		conf    string
		ann     map[string]string
		env     nodeEnv
		wantErr string // substring; code 11 for "try again"
		// wantGate is the refusal's gate when the pod's annotations cause
		// wantErr (PodwireRefused on the pod), "" for the node's own errors.
		wantGate string
		check    func(t *testing.T, p *attachmentPlan)
	}{
		{name: "ordinary pod", conf: planConf, check: func(t *testing.T, p *attachmentPlan) {
			r := p.rec
			if !r.SourceCheck || r.Forwarding || !r.Egress || r.HostIfName != "veth1" || r.VLAN != nil || r.Complete {
				t.Errorf("record: %+v", r)
			}
			if len(p.tables) != 4 { // source check (inet, bridge), port check, egress
				t.Errorf("tables: %d, want 4", len(p.tables))
			}
			if len(p.elems[sourcecheck.ID]) == 0 || len(p.elems[sourcecheck.BridgeID]) != 0 {
				t.Errorf("want inet source-check elements only: %v", p.elems)
			}
		}},
		{name: "pod on a bridging primary", conf: planConf,
			env: nodeEnv{primary: &primary.Attachment{HostIfName: "veth1", Bridge: "cni0", Addresses: []netip.Addr{netip.MustParseAddr("10.199.0.5")}}},
			check: func(t *testing.T, p *attachmentPlan) {
				if p.rec.HostBridge != "cni0" || !p.rec.SourceCheck {
					t.Errorf("record: %+v", p.rec)
				}
				if len(p.elems[sourcecheck.BridgeID]) == 0 || len(p.elems[sourcecheck.ID]) != 0 {
					t.Errorf("want bridge source-check elements only: %v", p.elems)
				}
			}},
		{name: "primary without a host interface", conf: planConf,
			env: nodeEnv{primary: &primary.Attachment{Unchecked: "pod interface \"eth0\" is a macvlan", Addresses: []netip.Addr{netip.MustParseAddr("10.199.0.5")}}},
			check: func(t *testing.T, p *attachmentPlan) {
				if p.rec.Unchecked == "" || len(p.elems[sourcecheck.ID])+len(p.elems[sourcecheck.BridgeID]) != 0 {
					t.Errorf("record %+v, elements %v", p.rec, p.elems)
				}
			}},
		{name: "forwarding pod", conf: planConf, ann: fwd, env: nodeEnv{hostRPFilter: "1"}, check: func(t *testing.T, p *attachmentPlan) {
			r := p.rec
			if r.SourceCheck || !r.Forwarding || len(r.Routes) != 1 || r.HostSysctls["net/ipv4/conf/veth1/rp_filter"] != "1" {
				t.Errorf("record: %+v", r)
			}
			if len(p.elems[sourcecheck.ID]) != 0 {
				t.Errorf("forwarding pod has source-check elements: %v", p.elems[sourcecheck.ID])
			}
		}},
		{name: "forwarding pod on a bridging primary", conf: planConf, ann: fwd,
			env: nodeEnv{hostRPFilter: "1", primary: &primary.Attachment{HostIfName: "veth1", Bridge: "cni0", Addresses: []netip.Addr{netip.MustParseAddr("10.199.0.5")}}},
			check: func(t *testing.T, p *attachmentPlan) {
				if len(p.rec.Routes) != 1 || p.rec.Routes[0].Dev != "cni0" || p.rec.Routes[0].Via != netip.MustParseAddr("10.199.0.5") {
					t.Errorf("routes: %v, want 198.51.100.0/25 via 10.199.0.5 dev cni0 (the bridge, not its port)", p.rec.Routes)
				}
			}},
		{name: "VLAN access port, MTU from the uplink", conf: strings.Replace(planConf, `"name":"n"`, `"name":"n","uplink":"eth1"`, 1),
			ann: vlan, env: nodeEnv{vlan: vlanbridge.Env{Uplink: "eth1", UplinkMTU: 9000}}, check: func(t *testing.T, p *attachmentPlan) {
				v := p.rec.VLAN
				if v == nil || v.PVID != 100 || v.Uplink != "eth1" || v.MTU != 9000 || !v.PortCheck || v.HostVeth != vlanbridge.HostVethName("c1", "eth0") {
					t.Errorf("VLAN: %+v", v)
				}
				if len(p.elems[vlanbridge.PortCheckID]) == 0 {
					t.Errorf("no port-check elements: %v", p.elems)
				}
			}},
		{name: "primary unreadable", conf: planConf, env: nodeEnv{primaryErr: errors.New("no veth peer")}, wantErr: "no veth peer"},
		{name: "host rp_filter unreadable", conf: planConf, ann: fwd, env: nodeEnv{hostRPFilterErr: errors.New("EACCES")}, wantErr: "EACCES"},
		{name: "routes without a host interface", conf: planConf, ann: fwd,
			env: nodeEnv{primary: &primary.Attachment{Addresses: []netip.Addr{netip.MustParseAddr("10.199.0.5")}}}, wantErr: "host interface is unknown"},
		{name: "node annotation not written yet", conf: planConf,
			env: nodeEnv{tables: nodetables.Env{NodeEgressErr: types.NewError(types.ErrTryAgainLater, "not yet", "")}}, wantErr: "not yet"},
		{name: "VLAN name clash", conf: planConf, ann: vlan, env: nodeEnv{vlan: vlanbridge.Env{NamesErr: errors.New("net1 exists")}}, wantErr: "clash"},
		{name: "VLAN interface named like the primary", conf: planConf,
			ann: map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ifname": "eth0"}, wantErr: "clashes with the pod's primary",
			wantGate: agentapi.RefusalBadAnnotation},
		{name: "VLAN interface named like a Multus attachment", conf: planConf,
			ann:      map[string]string{"podwire.io/vlan": "100", "k8s.v1.cni.cncf.io/networks": "nf/macvlan-a"},
			wantErr:  `podIfName "net1" clashes with the interface Multus gives the pod's network "nf/macvlan-a"`,
			wantGate: agentapi.RefusalBadAnnotation},
		{name: "VLAN interface beside Multus attachments", conf: planConf,
			ann: map[string]string{"podwire.io/vlan": "100", "podwire.io/vlan-ifname": "vlan0",
				"k8s.v1.cni.cncf.io/networks": `[{"name":"macvlan-a"},{"name":"b","interface":"vlan1"}]`},
			check: func(t *testing.T, p *attachmentPlan) {
				if v := p.rec.VLAN; v == nil || v.PodIfName != "vlan0" {
					t.Errorf("VLAN: %+v", v)
				}
			}},
		{name: "bridge name taken by another link", conf: planConf, ann: vlan, env: nodeEnv{vlan: vlanbridge.Env{BridgeType: "dummy"}}, wantErr: "not a bridge"},
		{name: "foreign bridge without VLAN filtering", conf: planConf, ann: vlan, env: nodeEnv{vlan: vlanbridge.Env{BridgeType: "bridge"}}, wantErr: "no VLAN filtering"},
		{name: "uplink with a global address", conf: strings.Replace(planConf, `"name":"n"`, `"name":"n","uplink":"eth1"`, 1),
			ann: vlan, env: nodeEnv{vlan: vlanbridge.Env{UplinkErr: errors.New("holds 192.0.2.1")}}, wantErr: "invalid uplink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := tc.ann
			if ann == nil {
				ann = map[string]string{}
			}
			in := planFor(t, tc.conf, ann, tc.env)
			p, err := planAttachment(in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if gate := podmeta.RefusalGate(err); gate != tc.wantGate {
					t.Errorf("refusal gate %q, want %q", gate, tc.wantGate)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
			again, err := planAttachment(in)
			if err != nil || !reflect.DeepEqual(p.rec, again.rec) || !reflect.DeepEqual(p.elems, again.elems) || len(p.tables) != len(again.tables) {
				t.Fatalf("planning twice gave different plans (err %v)", err)
			}
			for i := range p.tables {
				if p.tables[i].Hash() != again.tables[i].Hash() {
					t.Errorf("planning twice gave different tables %s", p.tables[i].ID())
				}
			}
		})
	}
}
