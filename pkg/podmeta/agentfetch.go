package podmeta

import (
	"context"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/config"
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

// NamespaceLabels asks the agent for the labels of namespace ns, for the
// gates that select namespaces by label (config.LabelSelector). Errors as
// PodAnnotations': 11 when no agent answers in time, the agent's code when
// the API answered no (no such namespace).
func (f AgentFetcher) NamespaceLabels(ctx context.Context, ns string) (map[string]string, error) {
	resp, err := agentapi.Call(ctx, f.Socket, agentapi.Request{Op: agentapi.OpNamespace, Namespace: ns})
	msg := fmt.Sprintf("failed to read the labels of namespace %q from the podwire agent (a gate selects namespaces by label)", ns)
	if err != nil {
		return nil, types.NewError(types.ErrTryAgainLater, msg, err.Error())
	}
	if resp.Code != 0 {
		return nil, types.NewError(resp.Code, msg, resp.Error)
	}
	if resp.Labels == nil {
		return map[string]string{}, nil
	}
	return resp.Labels, nil
}

// NeedsNamespaceLabels reports whether the gates of an ADD of a pod with
// annotations a under conf read the namespace's labels: conf selects
// namespaces by label and the pod asks for forwarding or a VLAN, or the
// config itself puts it on one (its grant decides the port's pinning).
func NeedsNamespaceLabels(conf *config.NetConf, id Identity, a *Annotations) bool {
	if id.Namespace == "" || !conf.SelectsNamespaces() {
		return false
	}
	fwd := a != nil && (a.Forwarding || len(a.AllowedSourcePrefixes) > 0 || len(a.Routes) > 0)
	return fwd || (a != nil && a.WantsVLAN()) || conf.VLAN != 0 || conf.VLANTrunk != ""
}
