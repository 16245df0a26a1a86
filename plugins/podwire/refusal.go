package main

import (
	"context"
	"time"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/podmeta"
)

// refusalReportTimeout bounds the report of a refusal to the node agent:
// the ADD fails anyway, so an agent that is slow or absent delays it by at
// most this much (an absent one by a failed dial, microseconds).
const refusalReportTimeout = 250 * time.Millisecond

// refused logs the refusal err of this ADD, reports it to the node agent
// (agentapi.OpRefusal, for its podwire_refusals_total by reason) and
// returns err unchanged: the runtime gets the CNI error whether or not an
// agent heard of it. reason is the gate (an agentapi.Refusal* value); ""
// takes it from a *podmeta.Refusal in err.
func (s *session) refused(reason string, err error) error {
	if reason == "" {
		reason = podmeta.RefusalGate(err)
	}
	if reason == "" {
		reason = agentapi.RefusalOther
	}
	s.log.Warn("refused", "reason", reason, "error", err)
	ctx, cancel := context.WithTimeout(context.Background(), refusalReportTimeout)
	defer cancel()
	msg := err.Error()
	if len(msg) > agentapi.MaxRefusalMessage {
		msg = msg[:agentapi.MaxRefusalMessage]
	}
	if rerr := agentapi.Notify(ctx, s.conf.AgentSocket, agentapi.Request{
		Op: agentapi.OpRefusal, Reason: reason, Message: msg,
		Namespace: s.pod.Namespace, Name: s.pod.Name, UID: s.pod.UID,
	}); rerr != nil {
		// A node without the agent, or an agent of an older release.
		s.log.Debug("refusal not reported to the agent", "error", rerr)
	}
	return err
}
