// Package nodetables describes podwire's node-wide nftables tables: the
// stateless load-balancer probe SNAT (ip6/ip podwire-probe-snat) and the
// per-node egress IPs (inet podwire-egress). pkg/nft lays them down on the
// first ADD and repairs them when they are flushed, deleted or built from an
// older config; this package only says what they are for a config and a node.
//
// What the tables depend on besides the config is read from the node by
// ReadEnv: the interfaces holding the default route (the probe's uplinks when
// probeSNAT.interfaces is empty) and the egress IPs of the node annotation
// (cached in stateDir, see annotation.go). Both are part of the tables' hash,
// so a moved default route or a changed annotation rebuilds the tables on
// the next ADD.
//
// Limits: the uplinks are detected in the netns podwire runs in (the node's);
// an uplink that appears later (a default route learnt from a router
// advertisement after the first ADD) is picked up by the next ADD, not at once.
package nodetables

import (
	"net/netip"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/state"
)

// Table names; both start with nft.OwnerPrefix.
const (
	probeTable  = "podwire-probe-snat"
	egressTable = "podwire-egress"
)

// IDs are every table this package may describe, wanted or not: what Ensure
// deletes when the config no longer wants it.
func IDs() []nft.ID {
	return []nft.ID{
		{Family: nftables.TableFamilyIPv6, Name: probeTable},
		{Family: nftables.TableFamilyIPv4, Name: probeTable},
		{Family: nftables.TableFamilyINet, Name: egressTable},
	}
}

// Env is what the tables depend on besides the config, read from the node.
type Env struct {
	// Uplinks4 and Uplinks6 are the interfaces of the IPv4 and IPv6 probe
	// rewrite: probeSNAT.interfaces, else the interfaces holding the
	// default route of that family. Sorted.
	Uplinks4, Uplinks6 []string
	// Egress4 and Egress6 are the egress IPs in effect: the node
	// annotation's (when enabled and cached) else egress.ips; invalid when
	// there is none of that family.
	Egress4, Egress6 netip.Addr
	// Cluster is the cluster's pod CIDRs and node IPs the node agent
	// wrote into stateDir (WriteCluster), excepted from egress SNAT beside
	// egress.exceptCIDRs; nil when no agent wrote them.
	Cluster *Cluster
	// Warnings are findings for the log and `podwire status`.
	Warnings []string
	// NodeEgressErr is CNI error 11 (try again later) when
	// egress.nodeAnnotation is on and the node agent has not written the
	// node's annotation into stateDir (or it cannot be read): an ADD must
	// not guess the egress IP. Nil otherwise.
	NodeEgressErr error
}

// Tables returns the node tables for conf on a node described by env, in a
// stable order: probe SNAT (ip6, then ip) and egress. None when neither
// probeSNAT nor egress is configured.
func Tables(conf *config.NetConf, env Env) []*nft.Table {
	var out []*nft.Table
	if t := probeSNATTable(conf, nftables.TableFamilyIPv6, env.Uplinks6); t != nil {
		out = append(out, t)
	}
	if t := probeSNATTable(conf, nftables.TableFamilyIPv4, env.Uplinks4); t != nil {
		out = append(out, t)
	}
	if conf.EgressEnabled() {
		out = append(out, egressTableFor(conf, env))
	}
	return out
}

// Elements returns the set elements of one attachment: its addresses as
// egress sources, when egress is configured or the record says the pod was
// made an egress source (so that DEL after a config change still removes
// them). Probe SNAT has no per-pod state.
func Elements(conf *config.NetConf, rec *state.Record) nft.Elements {
	e := nft.Elements{}
	AddElements(e, conf, rec)
	return e
}

// AddElements adds the set elements of Elements(conf, rec) to e (a rebuild
// of the node tables gathers every pod's into one).
func AddElements(e nft.Elements, conf *config.NetConf, rec *state.Record) {
	if !conf.EgressEnabled() && !rec.Egress {
		return
	}
	id := nft.ID{Family: nftables.TableFamilyINet, Name: egressTable}
	comment := rec.PodRef()
	for _, a := range rec.Addresses {
		a = a.Unmap()
		set := setPods6
		if a.Is4() {
			set = setPods4
		}
		e.Add(id, set, nftables.SetElement{Key: nft.AddrKey(a), Comment: comment})
	}
}
