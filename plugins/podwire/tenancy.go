package main

import (
	"fmt"

	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/state"
)

// Tenancy across pods: what one attachment holds on the node (its static
// VLAN addresses, its VRRP groups' virtual addresses, its node routes) no
// other may take (podmeta.CheckClaims).
// The gates that need only the config and the pod ran before
// (podmeta.Admit). The claims of the other attachments are their records,
// read under the node lock by a pod that claims anything (cmdAdd holds it
// from the read to the first write of the pod's record), so two ADDs cannot
// both take one address or route.

// claims reports whether the pod of in asks for anything another pod could
// hold: static VLAN addresses, VRRP virtual addresses or routes.
func claims(in *planInput) bool {
	return len(in.ann.VLANIPs) > 0 || len(in.ann.VRRP) > 0 || len(in.ann.Routes) > 0
}

// claimOf is what rec holds on the node.
func claimOf(rec *state.Record) podmeta.Claim {
	c := podmeta.Claim{Key: rec.Key(), Pod: rec.PodRef()}
	for _, r := range rec.Routes {
		c.Routes = append(c.Routes, r.Dst)
	}
	if v := rec.VLAN; v != nil {
		c.Bridge, c.PVID = v.Bridge, v.PVID
		for _, ip := range v.IPs {
			c.VLANIPs = append(c.VLANIPs, ip.Addr())
		}
		c.VRRP = v.VRRP
	}
	return c
}

// readHeld reads the claims of every attachment recorded in stateDir.
func readHeld(stateDir string) ([]podmeta.Claim, error) {
	recs, err := state.New(stateDir).List()
	if err != nil {
		// A record that cannot be read may hold what the pod asks for.
		return nil, fmt.Errorf("cannot tell which addresses and routes other pods hold: %w", err)
	}
	held := make([]podmeta.Claim, 0, len(recs))
	for _, r := range recs {
		held = append(held, claimOf(r))
	}
	return held, nil
}

// planClaims refuses the attachment rec when it takes an address or route
// another attachment holds (rec.VLAN and rec.Routes are planned).
func planClaims(in *planInput, rec *state.Record) error {
	mine := claimOf(rec)
	if len(mine.VLANIPs) == 0 && len(mine.VRRP) == 0 && len(mine.Routes) == 0 {
		return nil
	}
	if in.env.heldErr != nil {
		return in.env.heldErr
	}
	return podmeta.CheckClaims(mine, in.env.held)
}
