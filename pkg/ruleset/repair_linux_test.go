package ruleset

import (
	"net/netip"
	"testing"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nft/nfttest"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/state"
)

// TestRepair is the node agent's full verify in a throwaway netns: it lays
// the tables down with the records' elements, finds nothing to do the second
// time, and puts back an element deleted behind its back and a flushed chain.
func TestRepair(t *testing.T) {
	_, c := nfttest.Throwaway(t)
	conf, err := config.Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"podwire","egress":{"ips":["203.0.113.10"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	store := state.New(t.TempDir())
	for i, a := range []string{"10.244.1.2", "10.244.1.3"} {
		rec := &state.Record{ContainerID: "c" + a, IfName: "eth0", HostIfName: "veth" + a[len(a)-1:],
			PodNamespace: "ns", PodName: "p", Addresses: []netip.Addr{netip.MustParseAddr(a)}, Complete: true, Egress: true}
		if err := store.Put(rec); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	env := nodetables.Env{Egress4: conf.EgressV4}
	rep, missing, err := Repair(c, conf, env, store)
	if err != nil || len(rep.Rebuilt) != 3 || len(missing) != 0 {
		t.Fatalf("first Repair: %+v missing %v err %v, want the source checks (inet, bridge) and egress built", rep, missing, err)
	}
	if rep, missing, err = Repair(c, conf, env, store); err != nil || rep.Changed() || len(missing) != 0 {
		t.Fatalf("second Repair: %+v missing %v err %v, want nothing to do", rep, missing, err)
	}

	want := Tables(conf, env)
	sc := want[0]
	s, err := c.GetSetByName(&nftables.Table{Family: sc.Family, Name: sc.Name}, "pod-v4")
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := store.List()
	gone := Elements(conf, recs[0])[sc.ID()]["pod-v4"]
	if err := c.SetDeleteElements(s, gone); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if rep, missing, err = Repair(c, conf, env, store); err != nil || rep.Changed() || len(missing) != 1 || missing[sc.ID()] != 1 {
		t.Fatalf("Repair after an element was deleted: %+v missing %v err %v, want 1 re-added in %s", rep, missing, err, sc.ID())
	}
	if err := nft.CheckElements(c, want, AllElements(conf, recs)); err != nil {
		t.Errorf("after the repair: %v", err)
	}

	c.FlushChain(&nftables.Chain{Table: &nftables.Table{Family: sc.Family, Name: sc.Name}, Name: sc.Chains[0].Name})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if rep, _, err = Repair(c, conf, env, store); err != nil || len(rep.Rebuilt) != 1 || rep.Rebuilt[0] != sc.ID() || len(rep.Drift) == 0 {
		t.Fatalf("Repair after a flushed chain: %+v %v, want inet podwire rebuilt", rep, err)
	}
	if err := nft.CheckElements(c, want, AllElements(conf, recs)); err != nil {
		t.Errorf("after the rebuild: %v", err)
	}
}
