package agentapi

// Refusal reasons of the tenancy gates, beside those of
// agentapi.go. An agent whose RefusalReasons lacks one counts it as
// RefusalOther.
const (
	// RefusalSourcePrefixes: podwire.io/allowed-source-prefixes outside
	// forwarding.sourcePrefixes.
	RefusalSourcePrefixes = "source-prefixes"
	// RefusalVLANSubnets: podwire.io/vlan-ips outside the subnets of the
	// pod's VLAN grant.
	RefusalVLANSubnets = "vlan-subnets"
	// RefusalAddressHeld: a podwire.io/vlan-ips address another attachment
	// of the node holds on the same VLAN.
	RefusalAddressHeld = "address-held"
	// RefusalRouteOverlap: a podwire.io/routes prefix overlapping another
	// attachment's route on the node.
	RefusalRouteOverlap = "route-overlap"
)
