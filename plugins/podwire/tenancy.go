package main

import (
	"context"
	"fmt"
	"time"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/state"
)

// Tenancy across pods: what one attachment holds (its static VLAN
// addresses, its VRRP groups' virtual addresses, its node routes) no other
// may take (podmeta.CheckClaims), on this node or, with claimScope
// "cluster" (the default), on any node: those span nodes (a VLAN is one
// segment through the switches, a route is announced to the whole
// network), so after the check against this node's records the pod asks
// the node agent, which holds every node's claims (claimCluster).
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

// readHeld reads the claims of every attachment recorded in stateDir.
func readHeld(stateDir string) ([]podmeta.Claim, error) {
	recs, err := state.New(stateDir).List()
	if err != nil {
		// A record that cannot be read may hold what the pod asks for.
		return nil, fmt.Errorf("cannot tell which addresses and routes other pods hold: %w", err)
	}
	held := make([]podmeta.Claim, 0, len(recs))
	for _, r := range recs {
		held = append(held, podmeta.ClaimOf(r))
	}
	return held, nil
}

// planClaims refuses the attachment rec when it takes an address or route
// another attachment holds (rec.VLAN and rec.Routes are planned).
func planClaims(in *planInput, rec *state.Record) error {
	mine := podmeta.ClaimOf(rec)
	if len(mine.VLANIPs) == 0 && len(mine.VRRP) == 0 && len(mine.Routes) == 0 {
		return nil
	}
	if in.env.heldErr != nil {
		return in.env.heldErr
	}
	return podmeta.CheckClaims(mine, in.env.held)
}

// releaseTimeout bounds the release of an attachment's cluster-wide
// claims: DEL never fails for it and never waits long for an agent that is
// gone (the agent collects a lost release once the record is gone).
const releaseTimeout = 2 * time.Second

// claimsCluster reports whether rec holds anything the cluster's claims
// hold for it (claimScope "cluster").
func claimsCluster(conf *config.NetConf, rec *state.Record) bool {
	return conf.ClaimScope == config.ClaimScopeCluster && !podmeta.ClaimOf(rec).Empty()
}

// claimCluster asks the node agent to hold rec's claims across the cluster
// (podmeta.ClaimCluster: a *podmeta.Refusal naming the holder, or CNI
// error 11 when the agent or the API cannot tell). cmdAdd calls it under
// the node lock, after the check against this node's records and before
// the record is written; an ordinary pod makes no call.
func (s *session) claimCluster(rec *state.Record) error {
	if !claimsCluster(s.conf, rec) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	return podmeta.ClaimCluster(ctx, s.conf.AgentSocket, s.pod, podmeta.ClaimOf(rec))
}

// releaseCluster gives rec's cluster-wide claims back, best effort: the
// teardown of DEL, GC and ADD's rollback never fails for it.
func (x *invocation) releaseCluster() {
	if !claimsCluster(x.conf, x.rec) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := podmeta.ReleaseCluster(ctx, x.conf.AgentSocket, x.rec.Key()); err != nil {
		x.log.Warn("cluster-wide claims not released now; the node agent releases them once the record is gone", "error", err)
	}
}
