package vm

import (
	"slices"
	"testing"

	"github.com/podwire/podwire/integration/cnitest"
)

// TestVLANVerbsAcrossVersions runs ADD, CHECK, DEL (also without netns, and
// twice) for VLAN pods with every spec version, and GC (1.1.0): each verb's
// effect is proven with packets between the pods.
func TestVLANVerbsAcrossVersions(t *testing.T) {
	require(t, capVLANFiltering)
	for _, version := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		t.Run(version, func(t *testing.T) {
			n := newNode(t, vlanConf(nil))
			addUplink(t, n, "uplink0")
			add := func(vlan, ip string) *cnitest.Pod {
				t.Helper()
				p, err := n.addPodArgs(version, cnitest.PodArgs{Annotations: map[string]string{"podwire.io/vlan": vlan, "podwire.io/vlan-ips": ip}})
				if err != nil {
					t.Fatalf("%s: ADD on VLAN %s: %v", version, vlan, err)
				}
				return p
			}
			a := add("100", "192.0.2.1/24")
			b := add("100", "192.0.2.2/24")
			mustPing(t, a.NS, version+": a to b", "192.0.2.2")
			if err := b.CheckLast(); err != nil {
				t.Fatalf("%s: CHECK: %v", version, err)
			}
			if err := b.DelNoNetns(); err != nil {
				t.Fatalf("%s: DEL without netns: %v", version, err)
			}
			if err := b.Del(); err != nil {
				t.Fatalf("%s: second DEL: %v", version, err)
			}
			mustNotPing(t, a.NS, version+": a to b after b's DEL", "192.0.2.2")
			if version != "1.1.0" {
				return
			}
			c := add("101", "192.0.2.3/24")
			d := add("100", "192.0.2.4/24")
			mustPing(t, a.NS, "a to d before GC", "192.0.2.4")
			if got := uplinkVLANs(t, n); !slices.Equal(got, []uint16{100, 101}) {
				t.Fatalf("before GC uplink0 carries %v, want [100 101]", got)
			}
			if err := n.gc(a); err != nil {
				t.Fatalf("GC: %v", err)
			}
			mustNotPing(t, a.NS, "a to d after GC removed d", "192.0.2.4")
			e := add("100", "192.0.2.5/24")
			mustPing(t, a.NS, "a to a pod added after GC", "192.0.2.5")
			if got := uplinkVLANs(t, n); !slices.Equal(got, []uint16{100}) {
				t.Errorf("after GC uplink0 carries %v, want [100]", got)
			}
			if left := n.leftovers(); len(left) != 4 {
				t.Errorf("after GC want only the veths and records of a and e, got %v", left)
			}
			_, _, _ = c, d, e
		})
	}
}
