package integration

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// TestVerbsThroughLibcni drives every verb through libcni with podwire
// chained after ptp, for each spec version: ADD passes prevResult on, CHECK
// passes, STATUS answers, GC keeps valid attachments and removes the rest,
// DEL is idempotent and works as a runtime's second DEL (no netns, no
// prevResult) and after the netns vanished.
func TestVerbsThroughLibcni(t *testing.T) {
	for _, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			n := newNode(t)
			list := n.conflist(v, nil)
			if err := n.status(list); err != nil {
				t.Fatalf("STATUS: %v", err)
			}
			a := n.mustAddPod(podSpec{version: v})
			// A bystander with foreign annotations: GC keeping only a removes it.
			n.mustAddPod(podSpec{version: v, annotations: map[string]string{"unrelated": "x"}})
			if !a.v4.IsValid() || !a.v6.IsValid() {
				t.Fatalf("ADD result lacks ptp's dual-stack addresses: %+v", a.Result)
			}
			if a.Version != v {
				t.Errorf("result cniVersion = %q, want %q", a.Version, v)
			}
			// The chain's result is ptp's result passed on: same interfaces.
			if len(a.Result.Interfaces) != 2 {
				t.Errorf("result interfaces = %+v, want ptp's host veth and eth0", a.Result.Interfaces)
			}
			if got := len(n.records()); got != 2 {
				t.Fatalf("%d state records after two ADDs, want 2", got)
			}
			if hasCheck(v) {
				if err := a.Check(); err != nil {
					t.Fatalf("CHECK: %v", err)
				}
			}

			// GC with only a valid: libcni DELs b from its cache; then drop
			// a's cache entry so that only podwire's own GC can remove a's
			// record when a is not valid either.
			if err := n.gc(list, a); err != nil {
				t.Fatalf("GC: %v", err)
			}
			n.mustRecords(t, 1, "after GC keeping a")
			if v == "1.1.0" {
				if err := os.RemoveAll(filepath.Join(n.Dir, "cache")); err != nil {
					t.Fatal(err)
				}
				if err := n.gc(list); err != nil {
					t.Fatalf("GC: %v", err)
				}
				n.mustRecords(t, 0, "after podwire's GC with no valid attachment")
				return
			}
			if err := a.Del(); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if err := a.Del(); err != nil {
				t.Fatalf("second DEL: %v", err)
			}
			if err := a.DelNoNetns(); err != nil {
				t.Fatalf("DEL without netns and prevResult: %v", err)
			}
			n.mustRecords(t, 0, "after DEL")
		})
	}
}

// TestDelAfterNetnsVanished: the runtime removed the pod netns before DEL.
func TestDelAfterNetnsVanished(t *testing.T) {
	n := newNode(t)
	p := n.mustAddPod(podSpec{})
	p.ReleaseNS()
	if err := p.DelNoNetns(); err != nil {
		t.Fatalf("DEL after netns vanished: %v", err)
	}
	n.mustRecords(t, 0, "after DEL")
}

// TestAddWithoutPrevResult: podwire alone is a clear error, nothing left.
func TestAddWithoutPrevResult(t *testing.T) {
	n := newNode(t)
	list := n.conflist("1.0.0", nil)
	list.Plugins = list.Plugins[1:]
	rt := podSpec{}.runtimeConf("/var/run/netns/none")
	err := n.NS.Do(func(ns.NetNS) error {
		_, err := n.CNI.AddNetworkList(t.Context(), list, rt)
		return err
	})
	if err == nil || cniCode(err) != 7 {
		t.Fatalf("ADD without prevResult: err = %v (code %d), want code 7", err, cniCode(err))
	}
	if !reflect.DeepEqual(n.records(), []string(nil)) {
		t.Fatalf("records left: %v", n.records())
	}
}

// TestDelWithMalformedCNIArgs: DEL works from the record, so a CNI_ARGS that
// ADD would refuse (error 4) does not stop a DEL; podwire alone in the list,
// because host-local would refuse such args first.
func TestDelWithMalformedCNIArgs(t *testing.T) {
	n := newNode(t)
	p := n.mustAddPod(podSpec{})
	rt := *p.RT
	rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE;K8S_POD_NAME", "x"}}
	alone := *p.List
	alone.Plugins = alone.Plugins[1:]
	err := n.NS.Do(func(ns.NetNS) error {
		return n.CNI.DelNetworkList(t.Context(), &alone, &rt)
	})
	if err != nil {
		t.Fatalf("DEL with malformed CNI_ARGS: %v", err)
	}
	n.mustRecords(t, 0, "after DEL")
}

// TestRepeatedAddReplacesTheAttachment: an ADD for an attachment podwire
// already wired (a runtime retrying ADD without a DEL) first undoes the old
// one from its record, so nothing is doubled or left unrecorded: one record,
// one route, CHECK passes, and one DEL removes everything.
func TestRepeatedAddReplacesTheAttachment(t *testing.T) {
	n := newNode(t)
	keys := map[string]any{"forwarding": map[string]any{
		"namespaces": []string{"nf-*"}, "routablePrefixes": []string{"198.51.100.0/24"}}}
	p := n.mustAddPod(podSpec{namespace: "nf-a", podwire: keys, annotations: map[string]string{
		"podwire.io/forwarding": "true", "podwire.io/routes": "198.51.100.0/24"}})

	// podwire alone, with the chain's cached result as its prevResult.
	var cached types.Result
	n.Do(func() error {
		var err error
		cached, err = n.CNI.GetNetworkListCachedResult(p.List, p.RT)
		return err
	})
	var prev map[string]any
	b, _ := json.Marshal(cached)
	_ = json.Unmarshal(b, &prev)
	var entry map[string]any
	_ = json.Unmarshal(p.List.Plugins[1].Bytes, &entry)
	entry["prevResult"] = prev
	lb, _ := json.Marshal(map[string]any{"cniVersion": p.List.CNIVersion, "name": p.List.Name, "plugins": []any{entry}})
	alone, err := libcni.ConfListFromBytes(lb)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := n.NS.Do(func(ns.NetNS) error {
			_, err := n.CNI.AddNetworkList(t.Context(), alone, p.RT)
			return err
		}); err != nil {
			t.Fatalf("repeated ADD %d: %v\n%s", i+1, err, n.Log())
		}
	}
	n.mustRecords(t, 1, "after repeated ADDs")
	_, dst, _ := net.ParseCIDR("198.51.100.0/24")
	countRoutes := func() int {
		var routes []netlink.Route
		n.Do(func() error {
			var err error
			routes, err = netlinksafe.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
			return err
		})
		return len(routes)
	}
	if c := countRoutes(); c != 1 {
		t.Fatalf("%d routes for 198.51.100.0/24 after repeated ADDs, want 1", c)
	}
	if err := p.Check(); err != nil {
		t.Fatalf("CHECK after repeated ADDs: %v", err)
	}
	if err := p.Del(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if got, c := n.records(), countRoutes(); len(got) != 0 || c != 0 {
		t.Fatalf("after DEL: records %v, %d routes", got, c)
	}
}

// TestGCNullMeansNoneValid: libcni's GCNetworkList sends
// "cni.dev/valid-attachments": null when given GCArgs with a nil list (CRI-O
// does so for a network without pods): podwire removes every attachment of
// the network. Without GCArgs libcni sends no key, and podwire removes
// nothing. libcni's cache is dropped first, so only podwire's own GC can
// remove anything.
func TestGCNullMeansNoneValid(t *testing.T) {
	n := newNode(t)
	list := n.conflist("1.1.0", nil)
	n.mustAddPod(podSpec{version: "1.1.0"})
	n.mustAddPod(podSpec{version: "1.1.0"})
	if err := os.RemoveAll(filepath.Join(n.Dir, "cache")); err != nil {
		t.Fatal(err)
	}
	gc := func(args *libcni.GCArgs) error {
		return n.NS.Do(func(ns.NetNS) error { return n.CNI.GCNetworkList(t.Context(), list, args) })
	}
	if err := gc(nil); err != nil {
		t.Fatalf("GC without valid attachments key: %v", err)
	}
	n.mustRecords(t, 2, "after GC without the key")
	if c := n.podSetCount(); c == 0 {
		t.Fatal("set elements gone after GC without the key")
	}
	if err := gc(&libcni.GCArgs{}); err != nil {
		t.Fatalf("GC with null valid attachments: %v", err)
	}
	n.mustRecords(t, 0, "after GC with null")
	if c := n.podSetCount(); c != 0 {
		t.Fatalf("%d set elements after GC with null, want 0", c)
	}
}
