// Package cliapi is the JSON the operator CLI prints: `podwire status
// --json` (NodeStatus) and `podwire repair` (RepairResult). The
// plugin writes it; the node agent (which runs `podwire repair`) and the
// test suites (which run `podwire status`) read it with these same types,
// so that a field renamed on one side fails to compile on the other. It
// links no Kubernetes module: the plugin imports it.
package cliapi

import (
	"net/netip"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
)

// NodeStatus is what `podwire status` reports, in the node's netns, from the
// podwire entry of the node's conflist.
type NodeStatus struct {
	Conflist    string       `json:"conflist,omitempty"`
	StateDir    string       `json:"stateDir"`
	Tables      []Table      `json:"tables"`
	Bridge      Link         `json:"bridge"`
	Uplink      *Link        `json:"uplink,omitempty"`
	Attachments []Attachment `json:"attachments"`
	Warnings    []string     `json:"warnings"`
	// Agent is the node agent's own state, asked over agentSocket; nil
	// when no agent answered (a node without the DaemonSet).
	Agent *agentapi.Status `json:"agent,omitempty"`
}

// NotCurrent names the tables that are wanted or present but not current.
func (s *NodeStatus) NotCurrent() []string {
	var names []string
	for _, t := range s.Tables {
		if !t.Current {
			names = append(names, t.Name)
		}
	}
	return names
}

// Table is one podwire nftables table ("inet podwire"): wanted by the
// config and/or present on the node; current when present with the
// config's hash (the name of its config-<hash> chain).
type Table struct {
	Name    string `json:"name"`
	Hash    string `json:"hash,omitempty"`
	Wanted  bool   `json:"wanted"`
	Present bool   `json:"present"`
	Current bool   `json:"current"`
}

// Link is the node bridge or the uplink.
type Link struct {
	Name          string `json:"name"`
	Present       bool   `json:"present"`
	Up            bool   `json:"up,omitempty"`
	Ours          bool   `json:"ours,omitempty"`
	VLANFiltering bool   `json:"vlanFiltering,omitempty"`
	Ports         int    `json:"ports,omitempty"`
	Master        string `json:"master,omitempty"`
}

// Attachment is one wired pod, from its record.
type Attachment struct {
	Pod         string `json:"pod"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	HostIfName  string `json:"hostIfName,omitempty"`
	// HostBridge is the Linux bridge of a bridged pod (checked in "bridge
	// podwire"); Unchecked says why the pod's sources cannot be checked.
	HostBridge            string         `json:"hostBridge,omitempty"`
	Unchecked             string         `json:"unchecked,omitempty"`
	Addresses             []netip.Addr   `json:"addresses,omitempty"`
	Complete              bool           `json:"complete"`
	AnnotationSource      string         `json:"annotationSource,omitempty"`
	SourceCheck           bool           `json:"sourceCheck"`
	Forwarding            bool           `json:"forwarding"`
	AllowedSourcePrefixes []netip.Prefix `json:"allowedSourcePrefixes,omitempty"`
	Routes                []netip.Prefix `json:"routes,omitempty"`
	Egress                bool           `json:"egress"`
	VLAN                  string         `json:"vlan,omitempty"`
	// Drops is what the source check dropped from this pod's interface;
	// nil for a pod whose sources are not checked.
	Drops *Drops `json:"drops,omitempty"`
}

// RepairResult is what `podwire repair` prints (always JSON). Tables are named
// as nft(8) names them ("inet podwire").
type RepairResult struct {
	Conflist string `json:"conflist,omitempty"`
	Repaired bool   `json:"repaired"`
	// Tables are the tables the config wants.
	Tables []string `json:"tables"`
	// Drift names what differed before the repair; MissingElements counts
	// the records' set elements that were re-added.
	Drift           []string `json:"drift,omitempty"`
	MissingElements int      `json:"missingElements,omitempty"`
	// Rebuilt are the tables rebuilt (missing or drifted), Deleted the
	// obsolete ones deleted, and ElementsReadded the number of elements
	// re-added per table.
	Rebuilt         []string       `json:"rebuilt,omitempty"`
	Deleted         []string       `json:"deleted,omitempty"`
	ElementsReadded map[string]int `json:"elementsReadded,omitempty"`
	// Unknown are the node's pod interfaces without a record.
	Unknown []UnknownInterface `json:"unknown,omitempty"`
	// Errors are the node tables' errors: an egress IP of the Node
	// annotation outside egress.allowedCIDRs, an egress IP not assigned on
	// the node.
	Errors []string `json:"errors,omitempty"`
	// VLANRepaired are the VLAN attachments whose node side (bridge, port
	// VLANs, uplink) had drifted and was put back, one line each naming
	// the pod and what differed; VLANErrors what could not be.
	VLANRepaired []string `json:"vlanRepaired,omitempty"`
	VLANErrors   []string `json:"vlanErrors,omitempty"`
	// VLANLinks are the links of the node's VLAN wiring (bridges, pods'
	// ports, uplinks): a change to one is a reason to repair at once.
	VLANLinks []string `json:"vlanLinks,omitempty"`
}

// Drops counts what the source check dropped from one pod's interface
// (forged sources; on a bridge port also forged ARP/NA claims and router
// advertisements), read from the element counters of "inet podwire" or
// "bridge podwire" (sourcecheck.ReadDrops). The count restarts at zero when
// the element is re-added (a repair of the table).
type Drops struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// AttachmentDrops is the drops of r's interface in d (from
// sourcecheck.ReadDrops), or nil when r's sources are not checked or its
// element is missing.
func AttachmentDrops(r *state.Record, d map[string]sourcecheck.Drops) *Drops {
	if !r.SourceCheck || r.HostIfName == "" {
		return nil
	}
	v, ok := d[r.HostIfName]
	if !ok {
		return nil
	}
	return &Drops{Packets: v.Packets, Bytes: v.Bytes}
}

// UnknownInterface is a pod interface of the node that carries no podwire
// record: a pod whose ADD ran while podwire was not in the runtime's chain
// (a new node before the agent's first sync, the moments after a primary
// rewrote its conflist). Found by `podwire repair`: a port of a bridge that
// holds pods (the primary's, or a recorded pod's), or a veth without a
// master to which the node routes host addresses (/32, /128) inside the
// pod networks (the primary's IPAM ranges, the cluster's pod CIDRs).
type UnknownInterface struct {
	// Name is the host interface (the host veth).
	Name string `json:"name"`
	// Bridge is the bridge it is a port of ("" for a routed veth).
	Bridge string `json:"bridge,omitempty"`
	// Addresses are the host routes' destinations through it (routed).
	Addresses []netip.Addr `json:"addresses,omitempty"`
	// Dropped: its sources are checked as a pod's (routed: only the
	// addresses the node routes to it pass; bridged: none pass), by
	// `podwire repair --drop-unknown` (agent option unknownInterfaces=drop).
	Dropped bool `json:"dropped,omitempty"`
}

// CollectResult is what `podwire collect` prints: the attachment Key
// ("containerID/ifname") of the pod Pod ("namespace/name") with UID, and
// whether its record was there to collect (false: gone already, a DEL
// ran). A collected attachment went through DEL's own path.
type CollectResult struct {
	Key       string `json:"key"`
	Pod       string `json:"pod,omitempty"`
	UID       string `json:"uid,omitempty"`
	Collected bool   `json:"collected"`
}
