package agentapi

// Cluster-wide claims: what a pod holds that no pod of another node may
// take (a routed prefix, a static address or a VRRP virtual address on a
// VLAN, which is one segment across the nodes). The plugin asks the agent
// to hold them (OpClaim) before it records the attachment, and gives them
// back (OpRelease) when it removes the attachment. Both are new optional
// ops: an agent older than them answers 11 (unknown op), so the ADD of a
// pod that claims anything waits for the rollout, and never proceeds
// unchecked.

// Ops of the claims.
const (
	// OpClaim asks the agent to hold Claims for the attachment Attachment
	// ("containerID/ifname") of pod Namespace/Name (UID), against every
	// node's claims. The answer's Code is 0 when they are held (also when
	// the attachment held them already: a repeated ADD), 7 when another
	// pod holds one of them (Error names the annotation, the value and the
	// holder with its node; Reason is the gate, a Refusal* value), and 11
	// when the agent cannot tell (no API, a timeout): try again later,
	// never granted unchecked.
	OpClaim = "claim"
	// OpRelease asks the agent to drop every claim of the attachment
	// Attachment of this node. The plugin sends it with Notify when it
	// removes an attachment that claimed anything; a lost release is
	// collected by the agent once the attachment's record is gone.
	OpRelease = "release"
)

// Kinds of a Claim.
const (
	// ClaimRoute is a prefix the node routes to the pod
	// (podwire.io/routes); it overlaps no other pod's route.
	ClaimRoute = "route"
	// ClaimAddress is a static address on an access VLAN
	// (podwire.io/vlan-ips); one holder per address and VLAN.
	ClaimAddress = "address"
	// ClaimVIP is a virtual address of a VRRP group on an access VLAN
	// (podwire.io/vrrp); shared only by the pods of one namespace in the
	// same group (VRID).
	ClaimVIP = "vip"
)

// Claim is one thing an attachment holds cluster-wide.
type Claim struct {
	// Kind is ClaimRoute, ClaimAddress or ClaimVIP.
	Kind string `json:"kind"`
	// Value is a canonical CIDR (ClaimRoute) or a plain address.
	Value string `json:"value"`
	// VLAN is the access VLAN ID of a ClaimAddress or ClaimVIP.
	VLAN uint16 `json:"vlan,omitempty"`
	// VRID is the virtual router ID of a ClaimVIP (1-255).
	VRID uint8 `json:"vrid,omitempty"`
}

// RefusalVRRPGroup: a podwire.io/vrrp group (VRID) on a VLAN that pods of
// another namespace hold.
const RefusalVRRPGroup = "vrrp-group"
