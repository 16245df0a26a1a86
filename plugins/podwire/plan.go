package main

import (
	"fmt"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/forwarding"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/primary"
	"github.com/podwire/podwire/pkg/ruleset"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// nodeEnv is the node as one ADD sees it, read once before planning
// (readEnv): everything a plan depends on besides its input. A read that
// failed is kept as its error, for the concern that needs it to return.
type nodeEnv struct {
	// tables are the default-route uplinks and egress IPs
	// (nodetables.ReadEnv).
	tables nodetables.Env
	// primary is what the primary plugin made (host veth, addresses), from
	// prevResult or, when it names no host interface, the pod veth's peer.
	primary    *primary.Attachment
	primaryErr error
	// hostRPFilter is the host veth's rp_filter before ADD, read for a
	// forwarding pod only (restored on DEL).
	hostRPFilter    string
	hostRPFilterErr error
	// vlan is read for a pod that wants a VLAN only.
	vlan vlanbridge.Env
	// held are the claims (static VLAN addresses, routes) of the node's
	// attachments, from their records, read for a pod that claims any.
	held    []podmeta.Claim
	heldErr error
	// cluster is the cluster's pod CIDRs and node IPs (stateDir's cluster
	// file, nil without one), for a pod asking for routes (routeBounds).
	cluster    *nodetables.Cluster
	clusterErr error
}

// planInput is everything planning reads. Planning does no I/O: the node is
// env, read before.
type planInput struct {
	conf        *config.NetConf
	containerID string
	ifName      string
	netns       string
	pod         podmeta.Identity
	// ann are the pod's parsed annotations, source where they came from
	// (podmeta.Source*).
	ann    *podmeta.Annotations
	source string
	// prevResult is the primary plugin's result (never nil on ADD).
	prevResult *current.Result
	env        nodeEnv
	now        time.Time
}

// attachmentPlan is what ADD will make: the record (written before anything
// changes, so that DEL finds it), the node tables wanted and this
// attachment's set elements.
type attachmentPlan struct {
	rec    *state.Record
	tables []*nft.Table
	elems  nft.Elements
}

// planAttachment plans an ADD from in, concern by concern: what the primary
// made (every other concern keys on its host veth), the VLAN attachment,
// forwarding, the source check (which leaves forwarding pods and pods it
// cannot check out) and the node tables. It is pure: the same input gives
// the same plan. Its errors are the refusals of a concern (a name clash,
// an unusable bridge or uplink, a route outside the gates) and the reads of
// env a concern needed that failed.
func planAttachment(in *planInput) (*attachmentPlan, error) {
	rec := &state.Record{
		ContainerID: in.containerID, IfName: in.ifName, Netns: in.netns,
		Network: in.conf.Name, Created: in.now.UTC(),
		PodNamespace: in.pod.Namespace, PodName: in.pod.Name, PodUID: in.pod.UID,
		AnnotationSource: in.source,
	}
	if err := planPrimary(in, rec); err != nil {
		return nil, fmt.Errorf("primary: %w", err)
	}
	if err := planVLAN(in, rec); err != nil {
		return nil, fmt.Errorf("vlan: %w", err)
	}
	if err := planForwarding(in, rec); err != nil {
		return nil, fmt.Errorf("forwarding: %w", err)
	}
	if err := planClaims(in, rec); err != nil {
		return nil, fmt.Errorf("tenancy: %w", err)
	}
	planSourceCheck(in, rec)
	if err := planNodeTables(in, rec); err != nil {
		return nil, fmt.Errorf("nodetables: %w", err)
	}
	return &attachmentPlan{
		rec:    rec,
		tables: ruleset.Tables(in.conf, in.env.tables),
		elems:  ruleset.Elements(in.conf, rec),
	}, nil
}

// readEnv reads the node snapshot for planning an ADD of in (in.env is
// ignored): only what the plan of this pod can depend on.
func (p *plugin) readEnv(in *planInput) nodeEnv {
	env := nodeEnv{tables: p.node.tablesEnv(in.conf)}
	env.primary, env.primaryErr = p.node.primary(in.prevResult, in.ifName, in.netns)
	if in.ann.Forwarding && env.primaryErr == nil && env.primary.HostIfName != "" {
		env.hostRPFilter, env.hostRPFilterErr = p.sysctls.get(forwarding.RPFilterKey(env.primary.HostIfName))
	}
	// A VLAN the pod may not have is the plan's refusal: nothing to read.
	if v, err := wantedVLAN(in); err == nil && v != nil {
		env.vlan = p.node.vlanEnv(vlanbridge.PortOf(v, in.netns), in.conf.Uplinks())
	}
	if claims(in) {
		env.held, env.heldErr = readHeld(in.conf.StateDir)
	}
	if len(in.ann.Routes) > 0 {
		env.cluster, env.clusterErr = nodetables.ReadCluster(in.conf.StateDir)
	}
	return env
}
