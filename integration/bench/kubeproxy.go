package main

import (
	"fmt"
	"strings"
)

// foreignShape is the size of another owner's ruleset on a node.
type foreignShape struct {
	services  int // services with endpoints: a service chain each
	endpoints int // endpoints per service: an endpoint chain each
	idle      int // services without endpoints: set and map elements only
}

// defaultForeign is the node of issue 15: 20000 chains (5000 service
// chains, 15000 endpoint chains, plus the base chains), 100000 rules (5 per
// chain) and 50000 set and map elements (cluster IPs 22500, service IPs
// 5000, node ports 5000, endpoint-less services 17500).
var defaultForeign = foreignShape{services: 5000, endpoints: 3, idle: 17500}

// counts are what the ruleset holds beyond its few base chains.
func (f foreignShape) counts() (chains, rules, elements int) {
	chains = f.services * (1 + f.endpoints)
	rules = 5 * chains
	elements = (f.services + f.idle) + f.services + f.services + f.idle
	return chains, rules, elements
}

func serviceIP(i int) string  { return fmt.Sprintf("10.%d.%d.%d", 96+i>>16, (i>>8)&255, i&255) }
func endpointIP(j int) string { return fmt.Sprintf("10.%d.%d.%d", 200+j>>16, (j>>8)&255, j&255) }

// kubeProxyRuleset renders, for `nft -f`, a ruleset shaped like kube-proxy's
// nftables proxier (pkg/proxy/nftables): table ip kube-proxy with a
// cluster-IP set, verdict maps from service IP . protocol . port and from
// node port to per-service chains, a service chain per service port that
// masquerades off-cluster sources and picks an endpoint with numgen, an
// endpoint chain per endpoint that DNATs, and a map of services without
// endpoints to a reject chain. Five rules per service and endpoint chain.
func kubeProxyRuleset(f foreignShape) string {
	var w strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&w, format, a...) }
	svcChain := func(i int) string {
		return fmt.Sprintf("service-%08X-ns%d/svc%d/tcp/http", uint32(i)*2654435761, i%50, i)
	}
	epChain := func(i, e int) string {
		return fmt.Sprintf("endpoint-%08X-ns%d/svc%d/tcp/http__%s/8080", uint32(i*8+e)*2246822519, i%50, i, endpointIP(i*f.endpoints+e))
	}
	elements := func(n int, el func(i int) string) {
		for i := 0; i < n; i++ {
			if i > 0 {
				p(",")
				if i%8 == 0 {
					p("\n\t\t\t")
				}
			}
			p(" %s", el(i))
		}
	}
	p("table ip kube-proxy {\n")
	p("\tcomment \"rules for kube-proxy\"\n")
	p("\tset cluster-ips {\n\t\ttype ipv4_addr\n\t\tcomment \"Active ClusterIPs\"\n\t\telements = {")
	elements(f.services+f.idle, serviceIP)
	p(" }\n\t}\n")
	p("\tmap service-ips {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\t\tcomment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\"\n\t\telements = {")
	elements(f.services, func(i int) string { return fmt.Sprintf("%s . tcp . 80 : goto %s", serviceIP(i), svcChain(i)) })
	p(" }\n\t}\n")
	p("\tmap service-nodeports {\n\t\ttype inet_proto . inet_service : verdict\n\t\tcomment \"NodePort traffic\"\n\t\telements = {")
	elements(f.services, func(i int) string { return fmt.Sprintf("tcp . %d : goto %s", 30000+i, svcChain(i)) })
	p(" }\n\t}\n")
	p("\tmap no-endpoint-services {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\t\tcomment \"vmap to drop or reject packets to services with no endpoints\"\n\t\telements = {")
	elements(f.idle, func(i int) string { return fmt.Sprintf("%s . tcp . 80 : goto reject-chain", serviceIP(f.services+i)) })
	p(" }\n\t}\n")
	p("\tchain reject-chain {\n\t\treject\n\t}\n")
	p("\tchain mark-for-masquerade {\n\t\tmeta mark set meta mark | 0x4000\n\t}\n")
	p("\tchain masquerading {\n\t\tmeta mark & 0x4000 == 0 return\n\t\tmeta mark set meta mark ^ 0x4000\n\t\tmasquerade fully-random\n\t}\n")
	p("\tchain services {\n\t\tip daddr . meta l4proto . th dport vmap @service-ips\n\t\tfib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports\n\t}\n")
	p("\tchain filter-forward {\n\t\ttype filter hook forward priority -110; policy accept;\n\t\tip daddr . meta l4proto . th dport vmap @no-endpoint-services\n\t}\n")
	p("\tchain nat-prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services\n\t}\n")
	p("\tchain nat-output {\n\t\ttype nat hook output priority -100; policy accept;\n\t\tjump services\n\t}\n")
	p("\tchain nat-postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tjump masquerading\n\t}\n")
	for i := 0; i < f.services; i++ {
		vip := serviceIP(i)
		p("\tchain %s {\n", svcChain(i))
		p("\t\tip daddr %s tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade\n", vip)
		p("\t\tip daddr %s tcp dport 80 ip saddr 127.0.0.0/8 jump mark-for-masquerade\n", vip)
		p("\t\tip daddr %s udp dport 80 counter\n", vip)
		p("\t\tnumgen random mod %d vmap {", f.endpoints)
		for e := 0; e < f.endpoints; e++ {
			if e > 0 {
				p(",")
			}
			p(" %d : goto %s", e, epChain(i, e))
		}
		p(" }\n")
		p("\t\tcounter\n")
		p("\t}\n")
		for e := 0; e < f.endpoints; e++ {
			ep := endpointIP(i*f.endpoints + e)
			p("\tchain %s {\n", epChain(i, e))
			p("\t\tip saddr %s jump mark-for-masquerade\n", ep)
			p("\t\tip daddr %s udp dport 8080 counter\n", vip)
			p("\t\tip saddr 10.244.0.0/16 counter\n")
			p("\t\tmeta l4proto tcp counter\n")
			p("\t\tmeta l4proto tcp dnat to %s:8080\n", ep)
			p("\t}\n")
		}
	}
	p("}\n")
	return w.String()
}
