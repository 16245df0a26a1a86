// Package nodestatus is the shape of a PodwireNodeStatus
// (podwire.io/v1alpha1, cluster-scoped, one per node, named after it and
// owned by its Node): what the node's agent reports of the node, for
// `kubectl podwire` and the chart's `helm test`, which read the API only.
// The agent writes it (pkg/agent/nodestatus.go) when what it says changes,
// and its counters at most every few minutes; no agent reads another's, so
// a write costs the readers nothing. It links no Kubernetes module.
package nodestatus

import (
	"fmt"
	"time"
)

// The resource, as the chart's CRD defines it.
const (
	Group      = "podwire.io"
	Version    = "v1alpha1"
	Kind       = "PodwireNodeStatus"
	Resource   = "podwirenodestatuses"
	APIVersion = Group + "/" + Version
)

// Bounds of the lists a report carries, so that an object stays small
// whatever the node's pods do: every wired pod (a node runs at most its
// kubelet's maxPods, 110 by default, rarely more than 250) up to MaxPods,
// and the last MaxRefusals refusals.
const (
	MaxPods     = 1000
	MaxRefusals = 16
)

// Status is the report, the object's `status`.
type Status struct {
	// Updated is when the agent wrote the report.
	Updated time.Time `json:"updated"`
	Agent   Agent     `json:"agent"`
	Chain   Chain     `json:"chain"`
	Tables  Tables    `json:"tables"`
	// Failing are the agent's reconcilers whose last pass failed.
	Failing []Reconciler `json:"failing,omitempty"`
	// Errors are what the agent found wrong that a retry would not fix
	// (an egress IP refused, a Node's data refused), one line each.
	Errors []string `json:"errors,omitempty"`
	Counts Counts   `json:"counts"`
	// EgressIPs is the node's egress IPs as the agent wrote them for the
	// plugin (the Node annotation's value), "" when none.
	EgressIPs string `json:"egressIPs,omitempty"`
	// Routes are the prefixes the node's forwarding pods route, which the
	// agent publishes in its Node's podwire.io/routes.
	Routes []string `json:"routes,omitempty"`
	// Pods are the node's wired attachments, by namespace, name and
	// interface; PodsTruncated says MaxPods cut the list.
	Pods          []Pod `json:"pods,omitempty"`
	PodsTruncated bool  `json:"podsTruncated,omitempty"`
	// Refusals are the node's last ADDs the plugin refused, newest last.
	Refusals []Refusal `json:"refusals,omitempty"`
}

// Agent is the agent that wrote the report.
type Agent struct {
	Version  string    `json:"version"`
	Protocol int       `json:"protocol"`
	Pod      string    `json:"pod,omitempty"`
	Started  time.Time `json:"started"`
	Ready    bool      `json:"ready"`
	// NotReady is why the agent is not Ready ("" when it is).
	NotReady string `json:"notReady,omitempty"`
}

// Chain is podwire's place in the CNI chain the runtime reads.
type Chain struct {
	// InChain: podwire is in the chain the runtime reads; Reason says
	// why not.
	InChain bool   `json:"inChain"`
	Reason  string `json:"reason,omitempty"`
	// Conflist is the file holding podwire's entry, Mode how the agent
	// keeps it ("edit" or "derive").
	Conflist string `json:"conflist,omitempty"`
	Mode     string `json:"mode,omitempty"`
	// Restores counts the entry put back after a rewrite, since the
	// agent's start.
	Restores int `json:"restores"`
}

// Tables is the state of podwire's nftables tables on the node.
type Tables struct {
	// Verified: a verify (and repair of what differed) succeeded since
	// the agent's start.
	Verified bool `json:"verified"`
	// Repairs counts the repairs since the agent's start; LastRepair is
	// the last one's time and LastRepaired what it rebuilt.
	Repairs      int       `json:"repairs"`
	LastRepair   time.Time `json:"lastRepair,omitzero"`
	LastRepaired string    `json:"lastRepaired,omitempty"`
}

// Reconciler is one failing reconciler of the agent.
type Reconciler struct {
	Name       string    `json:"name"`
	LastError  string    `json:"lastError"`
	ErrorSince time.Time `json:"errorSince,omitzero"`
}

// Counts are the node's attachments, as of Updated.
type Counts struct {
	// Wired: attachments with a complete record; Checked: of those, the
	// ones whose sources are checked; Forwarding: admitted forwarding
	// pods; Unchecked: attachments whose sources cannot be checked (the
	// record says why); Unknown: pod interfaces without a record (wired
	// while podwire was out of the chain).
	Wired      int `json:"wired"`
	Checked    int `json:"checked"`
	Forwarding int `json:"forwarding"`
	Unchecked  int `json:"unchecked"`
	Unknown    int `json:"unknown"`
	// DroppedPackets is the sum of the source check's drops over the
	// checked attachments (forged sources), from nftables' counters.
	DroppedPackets uint64 `json:"droppedPackets"`
}

// Pod is one wired attachment and the gates it passed.
type Pod struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Interface string   `json:"interface"`
	Addresses []string `json:"addresses,omitempty"`
	// SourceCheck: its sources are checked; Unchecked says why a pod
	// that should be checked is not.
	SourceCheck bool   `json:"sourceCheck"`
	Unchecked   string `json:"unchecked,omitempty"`
	// Forwarding: admitted as a forwarding pod (podwire.io/forwarding);
	// Routes its podwire.io/routes; VLAN its access VLAN or trunk
	// ("100", "trunk 100-199"); VRRP its virtual router IDs; Egress: it
	// leaves the node from the node's egress IP.
	Forwarding     bool     `json:"forwarding,omitempty"`
	Routes         []string `json:"routes,omitempty"`
	VLAN           string   `json:"vlan,omitempty"`
	VRRP           []int    `json:"vrrp,omitempty"`
	Egress         bool     `json:"egress,omitempty"`
	DroppedPackets uint64   `json:"droppedPackets,omitempty"`
}

// Refusal is one ADD the plugin refused: the pod, the gate that refused
// it (podwire_refusals_total's reason) and the plugin's message.
type Refusal struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Gate      string    `json:"gate"`
	Message   string    `json:"message"`
	At        time.Time `json:"at"`
}

// Problems is nil when the report says the node is in order: the agent
// Ready, podwire in the chain, its tables verified, no reconciler failing,
// no finding (Errors) and no pod unchecked or unknown; else each problem,
// a sentence each.
func (s *Status) Problems() []string {
	var p []string
	if !s.Agent.Ready {
		p = append(p, "agent not ready: "+s.Agent.NotReady)
	}
	if !s.Chain.InChain {
		p = append(p, "podwire out of the runtime's chain: "+s.Chain.Reason)
	}
	if !s.Tables.Verified {
		p = append(p, "podwire's tables not verified")
	}
	for _, r := range s.Failing {
		p = append(p, "reconciler "+r.Name+" failing: "+r.LastError)
	}
	p = append(p, s.Errors...)
	if s.Counts.Unchecked > 0 {
		p = append(p, fmt.Sprintf("%d attachments whose sources cannot be checked", s.Counts.Unchecked))
	}
	if s.Counts.Unknown > 0 {
		p = append(p, fmt.Sprintf("%d pod interfaces without a podwire record (wired while podwire was out of the chain)", s.Counts.Unknown))
	}
	return p
}
