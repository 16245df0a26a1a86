package podmeta

import (
	"context"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/agentapi"
)

// ClaimCluster asks the node agent at socket to hold c's claims across the
// cluster (agentapi.OpClaim) for pod id, waiting for the agent until ctx's
// deadline. nil: held, by this attachment alone. A *Refusal (CNI error 7,
// the agent's message naming the annotation, the value and the holder with
// its node) when a pod holds one of them; CNI error 11 (try again later)
// when no agent answers in time or it cannot tell (the API unreachable, an
// agent older than the op): a claim is never granted unchecked.
func ClaimCluster(ctx context.Context, socket string, id Identity, c Claim) error {
	resp, err := agentapi.Call(ctx, socket, agentapi.Request{
		Op: agentapi.OpClaim, Namespace: id.Namespace, Name: id.Name, UID: id.UID,
		Attachment: c.Key, Claims: c.Wire(),
	})
	msg := fmt.Sprintf("failed to claim the routes and VLAN addresses of pod %s across the cluster (claimScope %q)", id, "cluster")
	switch {
	case err != nil:
		return types.NewError(types.ErrTryAgainLater, msg, err.Error())
	case resp.Code == types.ErrInvalidNetworkConfig:
		gate := resp.Reason
		if gate == "" {
			gate = agentapi.RefusalOther
		}
		return refuse(gate, resp.Error)
	case resp.Code != 0:
		return types.NewError(types.ErrTryAgainLater, msg, resp.Error)
	}
	return nil
}

// ReleaseCluster tells the node agent at socket that the attachment key
// ("containerID/ifname") holds nothing any more (agentapi.OpRelease), once,
// until ctx's deadline (agentapi.Notify): a DEL never waits for an absent
// agent, and the agent collects what a lost release left once the
// attachment's record is gone.
func ReleaseCluster(ctx context.Context, socket, key string) error {
	return agentapi.Notify(ctx, socket, agentapi.Request{Op: agentapi.OpRelease, Attachment: key})
}
