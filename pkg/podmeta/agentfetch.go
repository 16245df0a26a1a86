package podmeta

import (
	"context"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/agentapi"
)

// AgentFetcher asks the node agent (cmd/podwire-agent) for a pod's
// annotations over its unix socket. The agent answers from a metadata-only
// informer of the node's pods (a GET on a miss) and refuses a pod whose UID
// differs; the plugin itself links no Kubernetes client.
type AgentFetcher struct {
	// Socket is the agent's unix socket (config key agentSocket).
	Socket string
}

var _ Fetcher = AgentFetcher{}

// PodAnnotations asks the agent, waiting for it until ctx's deadline (it may
// be restarting). Errors: CNI error 11 (try again later) when no agent
// answers in time or the agent cannot answer yet; the agent's own code
// (999) when the API answered no (pod not found, UID mismatch).
func (f AgentFetcher) PodAnnotations(ctx context.Context, id Identity) (map[string]string, error) {
	resp, err := agentapi.Call(ctx, f.Socket, agentapi.Request{
		Op: agentapi.OpPod, Namespace: id.Namespace, Name: id.Name, UID: id.UID,
	})
	msg := fmt.Sprintf("failed to read the annotations of pod %s from the podwire agent", id)
	if err != nil {
		return nil, types.NewError(types.ErrTryAgainLater, msg, err.Error())
	}
	if resp.Code != 0 {
		return nil, types.NewError(resp.Code, msg, resp.Error)
	}
	return resp.Annotations, nil
}
