package config

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

const base = `{"cniVersion":"1.0.0","name":"net","type":"podwire"`

func conf(extra string) []byte {
	if extra == "" {
		return []byte(base + `}`)
	}
	return []byte(base + `,` + extra + `}`)
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse(conf(""))
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != DefaultStateDir || c.Bridge != DefaultBridge || c.PodIfName != DefaultPodIfName {
		t.Errorf("defaults: stateDir %q bridge %q podIfName %q", c.StateDir, c.Bridge, c.PodIfName)
	}
	if !c.SourceCheckEnabled() || c.EgressEnabled() || c.Result != nil {
		t.Errorf("defaults: sourceCheck %v egress %v result %v", c.SourceCheckEnabled(), c.EgressEnabled(), c.Result)
	}
}

// TestParseRetiredKeys: kubeconfig and nodeName (the plugin's own API
// client, now the agent's job) are accepted with a warning naming them, even
// with values the old validation refused.
func TestParseRetiredKeys(t *testing.T) {
	c, err := Parse(conf(`"kubeconfig":"/etc/../kubeconfig","nodeName":"Worker_1","egress":{"nodeAnnotation":true,"allowedCIDRs":["203.0.113.0/24"]}`))
	if err != nil {
		t.Fatalf("retired keys refused: %v", err)
	}
	if len(c.Warnings) != 2 || !strings.Contains(c.Warnings[0], "kubeconfig") || !strings.Contains(c.Warnings[1], "nodeName") {
		t.Errorf("warnings %q, want one naming kubeconfig and one naming nodeName", c.Warnings)
	}
	if c.AgentSocket != "/run/podwire/agent.sock" {
		t.Errorf("agentSocket default %q", c.AgentSocket)
	}
}

func TestParseFullExample(t *testing.T) {
	c, err := Parse(conf(`"logFile":"/var/log/podwire.log","stateDir":"/run/podwire",
	"agentSocket":"/run/podwire/agent.sock","bridge":"podwire0",
	"uplink":"eth1","mtu":1500,"podIfName":"net1","vlan":0,"vlanTrunk":"","allowedVLANs":"100-199,300",
	"sourceCheck":true,"forwarding":{"namespaces":["nf-*"],"routablePrefixes":["198.51.100.0/24"]},
	"probeSNAT":{"preset":"azure","interfaces":[]},
	"egress":{"ips":["203.0.113.10","2001:db8::10","203.0.113.11"],"exceptCIDRs":["10.244.0.0/16","10.96.0.0/12"],"nodeAnnotation":false},
	"someUnknownKey":{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.AllowedVLANSet) != 101 || !c.AllowedVLANSet.Contains(300) {
		t.Errorf("allowedVLANs parsed to %v", c.AllowedVLANSet)
	}
	if c.EgressV4 != netip.MustParseAddr("203.0.113.10") || c.EgressV6 != netip.MustParseAddr("2001:db8::10") {
		t.Errorf("egress %v %v", c.EgressV4, c.EgressV6)
	}
	if len(c.Warnings) != 2 || !strings.Contains(c.Warnings[0], "allowedVLANs") || !strings.Contains(c.Warnings[1], "egress.ips[2]") {
		t.Errorf("warnings %q, want allowedVLANs deprecated and one naming egress.ips[2]", c.Warnings)
	}
	if len(c.ProbePairs) != 1 || c.ProbePairs[0].From != AzureProbeFrom || c.ProbePairs[0].To != AzureProbeTo {
		t.Errorf("probe pairs %v", c.ProbePairs)
	}
	if len(c.RoutablePrefixes) != 1 || len(c.ExceptCIDRs) != 2 {
		t.Errorf("prefixes %v %v", c.RoutablePrefixes, c.ExceptCIDRs)
	}
}

func TestParsePrevResult(t *testing.T) {
	for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		in := `{"cniVersion":"` + v + `","name":"n","type":"podwire","prevResult":{"cniVersion":"` + v + `",
		"interfaces":[{"name":"veth1"},{"name":"eth0","sandbox":"/var/run/netns/p"}],
		"ips":[{"version":"4","address":"10.244.1.5/24","interface":1}]}}`
		if v != "0.4.0" {
			in = strings.Replace(in, `"version":"4",`, "", 1)
		}
		c, err := Parse([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if c.Result == nil || len(c.Result.IPs) != 1 || c.Result.IPs[0].Address.IP.String() != "10.244.1.5" {
			t.Errorf("%s: prevResult %+v", v, c.Result)
		}
	}
}

// invalidConfigs is the corpus of bad configs: each must be rejected with the
// code given and a message naming the key (and, for code 7, the value).
var invalidConfigs = []struct {
	name, extra string
	code        uint
	mention     []string
}{
	{"malformed JSON", `"mtu":`, types.ErrDecodingFailure, []string{"malformed JSON"}},
	{"mtu string", `"mtu":"1500"`, types.ErrDecodingFailure, []string{`"mtu"`}},
	{"sourceCheck string", `"sourceCheck":"yes"`, types.ErrDecodingFailure, []string{`"sourceCheck"`}},
	{"egress.ips not list", `"egress":{"ips":"203.0.113.10"}`, types.ErrDecodingFailure, []string{`"egress.ips"`}},
	{"forwarding.namespaces number", `"forwarding":{"namespaces":[1]}`, types.ErrDecodingFailure, []string{`forwarding.namespaces`}},
	{"vlan string", `"vlan":"100"`, types.ErrDecodingFailure, []string{`"vlan"`}},
	{"probeSNAT.interfaces string", `"probeSNAT":{"preset":"azure","interfaces":"eth0"}`, types.ErrDecodingFailure, []string{`probeSNAT.interfaces`}},
	{"mtu too small", `"mtu":60`, 7, []string{"mtu", "60"}},
	{"negative log size", `"logFileMaxSize":-1`, 7, []string{"logFileMaxSize", "-1"}},
	{"negative log backups", `"logFileMaxBackups":-3`, 7, []string{"logFileMaxBackups", "-3"}},
	{"log age string", `"logFileMaxAge":"7d"`, types.ErrDecodingFailure, []string{`"logFileMaxAge"`}},
	{"mtu too large", `"mtu":70000`, 7, []string{"mtu", "70000"}},
	{"mtu negative", `"mtu":-1`, 7, []string{"mtu", "-1"}},
	{"bridge too long", `"bridge":"abcdefghijklmnop"`, 7, []string{"bridge", "abcdefghijklmnop", "longer than 15"}},
	{"bridge with slash", `"bridge":"br/0"`, 7, []string{"bridge", "br/0"}},
	{"uplink with space", `"uplink":"eth 1"`, 7, []string{"uplink", "eth 1"}},
	{"podIfName dot", `"podIfName":"."`, 7, []string{"podIfName"}},
	{"podIfName colon", `"podIfName":"net:1"`, 7, []string{"podIfName", "net:1"}},
	{"uplink is bridge", `"uplink":"podwire0"`, 7, []string{"uplink", "podwire0"}},
	{"relative stateDir", `"stateDir":"run/podwire"`, 7, []string{"stateDir", "run/podwire"}},
	{"relative logFile", `"logFile":"podwire.log"`, 7, []string{"logFile"}},
	{"unclean agentSocket", `"agentSocket":"/run/../agent.sock"`, 7, []string{"agentSocket"}},
	{"vlan 4095 out of range", `"vlan":4095,"allowedVLANs":"1-4094"`, 7, []string{"vlan", "4095"}},
	{"vlan outside allowed", `"vlan":100,"allowedVLANs":"200"`, 7, []string{"vlan", "100", "allowedVLANs"}},
	{"vlan with no allowed", `"vlan":100`, 7, []string{"vlan", "100"}},
	{"allowedVLANs reversed", `"allowedVLANs":"300-200"`, 7, []string{"allowedVLANs", "300-200", "reversed"}},
	{"allowedVLANs garbage", `"allowedVLANs":"10,abc"`, 7, []string{"allowedVLANs", "abc"}},
	{"allowedVLANs 0", `"allowedVLANs":"0-10"`, 7, []string{"allowedVLANs", "0"}},
	{"vlanTrunk outside allowed", `"vlanTrunk":"100-110","allowedVLANs":"100-105"`, 7, []string{"vlanTrunk", "106-110"}},
	{"vlanTrunk empty item", `"vlanTrunk":"100,,200","allowedVLANs":"1-4094"`, 7, []string{"vlanTrunk"}},
	{"bad glob", `"forwarding":{"namespaces":["nf-["]}`, 7, []string{"forwarding.namespaces[0]", "nf-["}},
	{"empty glob", `"forwarding":{"namespaces":[""]}`, 7, []string{"forwarding.namespaces[0]"}},
	{"selector bad operator", `"forwarding":{"namespaceSelector":{"matchExpressions":[{"key":"team","operator":"in","values":["a"]}]}}`, 7, []string{"forwarding.namespaceSelector.matchExpressions[0].operator", `"in"`}},
	{"selector In without values", `"vlanGrants":[{"vlans":"100","namespaceSelector":{"matchExpressions":[{"key":"team","operator":"In"}]}}]`, 7, []string{"vlanGrants[0].namespaceSelector.matchExpressions[0].values", "In"}},
	{"selector Exists with values", `"forwarding":{"namespaceSelector":{"matchExpressions":[{"key":"team","operator":"Exists","values":["a"]}]}}`, 7, []string{"matchExpressions[0].values", "Exists"}},
	{"selector bad key", `"forwarding":{"namespaceSelector":{"matchLabels":{"Team/x":"a"}}}`, 7, []string{"forwarding.namespaceSelector.matchLabels", "Team/x", "prefix"}},
	{"selector bad value", `"forwarding":{"namespaceSelector":{"matchLabels":{"team":"a b"}}}`, 7, []string{"forwarding.namespaceSelector.matchLabels.team", "a b"}},
	{"selector not an object", `"forwarding":{"namespaceSelector":"team=a"}`, types.ErrDecodingFailure, []string{"forwarding.namespaceSelector"}},
	{"routable prefix is address", `"forwarding":{"routablePrefixes":["198.51.100.1"]}`, 7, []string{"forwarding.routablePrefixes[0]", "198.51.100.1", "CIDR"}},
	{"routable prefix host bits", `"forwarding":{"routablePrefixes":["198.51.100.1/24"]}`, 7, []string{"forwarding.routablePrefixes[0]", "198.51.100.0/24"}},
	{"routable prefix garbage", `"forwarding":{"routablePrefixes":["not-a-cidr/8"]}`, 7, []string{"forwarding.routablePrefixes[0]"}},
	{"unknown preset", `"probeSNAT":{"preset":"gcp"}`, 7, []string{"probeSNAT.preset", "gcp"}},
	{"probeSNAT empty", `"probeSNAT":{}`, 7, []string{"probeSNAT"}},
	{"probe rule mixed families", `"probeSNAT":{"rules":[{"from":"169.254.0.1","to":"2001:db8::1"}]}`, 7, []string{"probeSNAT.rules[0]", "mixes"}},
	{"probe rule CIDR", `"probeSNAT":{"rules":[{"from":"10.0.0.1/32","to":"10.0.0.2"}]}`, 7, []string{"probeSNAT.rules[0].from", "10.0.0.1/32", "CIDR"}},
	{"probe rule garbage", `"probeSNAT":{"rules":[{"from":"10.0.0.1","to":"x"}]}`, 7, []string{"probeSNAT.rules[0].to", `"x"`}},
	{"probe interface too long", `"probeSNAT":{"preset":"azure","interfaces":["averyveryverylongname"]}`, 7, []string{"probeSNAT.interfaces[0]"}},
	{"egress CIDR", `"egress":{"ips":["203.0.113.10/32"]}`, 7, []string{"egress.ips[0]", "203.0.113.10/32", "CIDR"}},
	{"egress garbage", `"egress":{"ips":["203.0.113"]}`, 7, []string{"egress.ips[0]", "203.0.113"}},
	{"egress link-local", `"egress":{"ips":["fe80::1"]}`, 7, []string{"egress.ips[0]", "fe80::1"}},
	{"egress zone", `"egress":{"ips":["2001:db8::1%eth0"]}`, 7, []string{"egress.ips[0]"}},
	{"exceptCIDR is address", `"egress":{"ips":["203.0.113.10"],"exceptCIDRs":["10.0.0.1"]}`, 7, []string{"egress.exceptCIDRs[0]", "10.0.0.1"}},
	{"vlanGrants not list", `"vlanGrants":{"vlans":"100"}`, types.ErrDecodingFailure, []string{`"vlanGrants"`}},
	{"vlanGrants no VLAN", `"vlanGrants":[{"namespaces":["a"]}]`, 7, []string{"vlanGrants[0].vlans", "names no VLAN"}},
	{"vlanGrants reversed", `"vlanGrants":[{"vlans":"300-200"}]`, 7, []string{"vlanGrants[0].vlans", "300-200"}},
	{"vlanGrants also in allowedVLANs", `"allowedVLANs":"100-105","vlanGrants":[{"vlans":"105-110"}]`, 7, []string{"vlanGrants[0].vlans", "105", "allowedVLANs", "every namespace"}},
	{"vlanGrants bad glob", `"vlanGrants":[{"vlans":"100","namespaces":["x["]}]`, 7, []string{"vlanGrants[0].namespaces[0]", "x["}},
	{"vlanGrants subnet host bits", `"vlanGrants":[{"vlans":"100","subnets":["192.0.2.1/24"]}]`, 7, []string{"vlanGrants[0].subnets[0]", "192.0.2.1/24"}},
	{"vlanGrants exclude outside", `"vlanGrants":[{"vlans":"100","subnets":["192.0.2.0/24"],"exclude":["198.51.100.1/32"]}]`, 7, []string{"vlanGrants[0].exclude[0]", "198.51.100.1/32", "subnets"}},
	{"vlan outside grants", `"vlan":101,"vlanGrants":[{"vlans":"100"}]`, 7, []string{"vlan", "101", "vlanGrants"}},
	{"vrrp VRID 0", `"vlanGrants":[{"vlans":"100","subnets":["192.0.2.0/24"],"vrrp":"0-5"}]`, 7, []string{"vlanGrants[0].vrrp", `"0-5"`, "out of range"}},
	{"vrrp VRID 256", `"vlanGrants":[{"vlans":"100","subnets":["192.0.2.0/24"],"vrrp":"256"}]`, 7, []string{"vlanGrants[0].vrrp", "256"}},
	{"vrrp garbage", `"vlanGrants":[{"vlans":"100","subnets":["192.0.2.0/24"],"vrrp":"7,x"}]`, 7, []string{"vlanGrants[0].vrrp", "7,x"}},
	{"vrrp without subnets", `"vlanGrants":[{"vlans":"100","vrrp":"7"}]`, 7, []string{"vlanGrants[0].vrrp", `"7"`, "vlanGrants[0].subnets"}},
	{"vrrp number", `"vlanGrants":[{"vlans":"100","vrrp":7}]`, types.ErrDecodingFailure, []string{"vlanGrants"}},
	{"sourcePrefixes address", `"forwarding":{"sourcePrefixes":["10.0.0.1"]}`, 7, []string{"forwarding.sourcePrefixes[0]", "10.0.0.1"}},
	{"allowedCIDRs garbage", `"egress":{"allowedCIDRs":["x/8"]}`, 7, []string{"egress.allowedCIDRs[0]", "x/8"}},
	{"egress ip outside allowedCIDRs", `"egress":{"ips":["203.0.113.10"],"allowedCIDRs":["198.51.100.0/24"]}`, 7, []string{"egress.ips[0]", "203.0.113.10", "egress.allowedCIDRs"}},
}

// TestParseTenancy: vlanGrants, forwarding.sourcePrefixes and
// egress.allowedCIDRs parse into the gates' values; allowedVLANs stays valid
// with a deprecation warning.
func TestParseTenancy(t *testing.T) {
	c, err := Parse(conf(`"vlan":101,"vlanGrants":[{"vlans":"100-101","namespaces":["team-a"],"subnets":["192.0.2.0/24"],"exclude":["192.0.2.1/32"]},
		{"vlans":"101,200","namespaces":["team-b"]}],
		"forwarding":{"sourcePrefixes":["10.99.0.0/16"]},"egress":{"ips":["203.0.113.10"],"allowedCIDRs":["203.0.113.0/24"],"nodeAnnotation":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.GrantedVLANSet.String() != "100-101,200" {
		t.Errorf("granted VLANs %s", c.GrantedVLANSet)
	}
	g := c.VLANGrants[0]
	a := netip.MustParseAddr
	ns := func(name string) Namespace { return Namespace{Name: name} }
	if !g.Grants(100, ns("team-a")) || g.Grants(100, ns("team-b")) || g.Grants(200, ns("team-a")) || g.Grants(100, ns("")) {
		t.Errorf("grant 0 namespaces/VLANs wrong: %+v", g)
	}
	if !g.Permits(a("192.0.2.10")) || g.Permits(a("192.0.2.1")) || g.Permits(a("198.51.100.1")) {
		t.Errorf("grant 0 subnets wrong: %+v", g)
	}
	if len(c.SourcePrefixBounds) != 1 || len(c.EgressBounds) != 1 {
		t.Errorf("bounds %v %v", c.SourcePrefixBounds, c.EgressBounds)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings %q, want none", c.Warnings)
	}
	c, err = Parse(conf(`"allowedVLANs":"100"`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "allowedVLANs") || !strings.Contains(c.Warnings[0], "deprecated") {
		t.Errorf("warnings %q, want allowedVLANs deprecated", c.Warnings)
	}
}

func TestParseInvalid(t *testing.T) {
	for _, tc := range invalidConfigs {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(conf(tc.extra))
			var te *types.Error
			if !errors.As(err, &te) {
				t.Fatalf("err = %v, want a *types.Error", err)
			}
			if te.Code != tc.code {
				t.Errorf("code = %d, want %d (%s)", te.Code, tc.code, te.Msg)
			}
			for _, m := range tc.mention {
				if !strings.Contains(te.Msg, m) {
					t.Errorf("message %q does not mention %q", te.Msg, m)
				}
			}
		})
	}
}

func TestCorpusSize(t *testing.T) {
	if len(invalidConfigs) < 25 {
		t.Fatalf("corpus has %d invalid configs, want at least 25", len(invalidConfigs))
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(base + `}`))
	for _, tc := range invalidConfigs {
		f.Add(conf(tc.extra))
	}
	f.Add(conf(`"allowedVLANs":"1-4094","vlanTrunk":"1,2,3-9","egress":{"ips":["::1","1.2.3.4"]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := Parse(in)
		if err != nil {
			var te *types.Error
			if !errors.As(err, &te) || (te.Code != 6 && te.Code != 7) {
				t.Fatalf("Parse(%q): error %v is not CNI error 6 or 7", in, err)
			}
			return
		}
		// A config that parses is self-consistent.
		if c.StateDir == "" || c.Bridge == "" || c.PodIfName == "" {
			t.Fatalf("Parse(%q): defaults missing", in)
		}
		for _, id := range c.TrunkVLANs {
			if !c.VLANAllowed(id) {
				t.Fatalf("Parse(%q): trunk VLAN %d outside allowedVLANs", in, id)
			}
		}
		if c.EgressV4.IsValid() && !c.EgressV4.Is4() || c.EgressV6.IsValid() && !c.EgressV6.Is6() {
			t.Fatalf("Parse(%q): egress families mixed", in)
		}
	})
}
