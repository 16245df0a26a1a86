package nodetables

import (
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nft/nfttest"
)

// TestKernelAcceptsTables lays the tables down in a throwaway netns through
// nft.Ensure, as ADD does: the kernel takes the rules (payload checksum
// attributes, NAT in an inet table, interval sets with merged CIDRs), the
// tables read back as current, and a second Ensure changes nothing.
func TestKernelAcceptsTables(t *testing.T) {
	netns, c := nfttest.Throwaway(t)
	conf := parse(t, `{"type":"podwire","probeSNAT":{"preset":"azure","rules":[{"from":"168.63.129.16","to":"10.0.0.250"}]},
		"egress":{"ips":["203.0.113.10","2001:db8::10"],"exceptCIDRs":["10.244.0.0/16","10.0.0.0/8","10.96.0.0/12","fd00::/8","0.0.0.0/0"]}}`)
	env := Env{Uplinks4: []string{"eth0"}, Uplinks6: []string{"eth0", "eth1"}, Egress4: conf.EgressV4, Egress6: conf.EgressV6}
	want := Tables(conf, env)
	noLock := func() (func(), error) { return func() {}, nil }
	elems := nft.Elements{}
	elems.Add(nft.ID{Family: nftables.TableFamilyINet, Name: egressTable}, setPods4,
		nftables.SetElement{Key: netip.MustParseAddr("10.244.1.5").AsSlice(), Comment: "ns/p"})
	rep, err := nft.Ensure(c, want, IDs(), noLock, func() (nft.Elements, error) { return elems, nil })
	if err != nil || !rep.Changed() {
		t.Fatalf("first Ensure: %+v err %v", rep, err)
	}
	for _, tb := range want {
		if d, err := nft.Verify(c, tb); err != nil || len(d) > 0 {
			t.Errorf("Verify after Ensure: %q %v", d, err)
		}
	}
	if rep, err = nft.Ensure(c, want, IDs(), noLock, nil); err != nil || rep.Changed() {
		t.Fatalf("second Ensure: %+v err %v, want no change", rep, err)
	}
	if err := nft.CheckElements(c, want, elems); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("NFT_DUMP") != "" {
		out, _ := exec.Command("ip", "netns", "exec", netns, "nft", "list", "ruleset").CombinedOutput()
		t.Log(string(out))
	}
	gone, err := RemoveAll(c)
	if err != nil || len(gone) != 3 {
		t.Fatalf("RemoveAll: %v %v", gone, err)
	}
}
