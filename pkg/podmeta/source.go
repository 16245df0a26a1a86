package podmeta

import (
	"context"
	"encoding/json"
)

// Source of the annotations a pod was resolved with, for logs and state.
const (
	SourceRuntime = "runtime" // the io.kubernetes.cri.pod-annotations capability
	SourceAgent   = "agent"   // the node agent's answer over its unix socket
	SourceNone    = "none"    // neither: the pod is treated as ordinary
)

// Fetcher reads a pod's annotations from outside the runtime's request: the
// node agent (AgentFetcher), used only when the runtime did not send the
// annotations capability. An implementation must refuse a pod whose UID
// differs from id.UID (when set), bound its time, and return CNI error 11
// (try again later) when it cannot answer.
type Fetcher interface {
	PodAnnotations(ctx context.Context, id Identity) (map[string]string, error)
}

// Resolve returns the pod's raw annotations and where they came from: the
// runtime's capability when it was sent (even as null), else fetcher (when
// non-nil and the pod is known), else none.
func Resolve(ctx context.Context, raw json.RawMessage, id Identity, fetcher Fetcher) (map[string]string, string, error) {
	ann, sent, err := RuntimeAnnotations(raw)
	if err != nil {
		return nil, SourceRuntime, err
	}
	if sent {
		return ann, SourceRuntime, nil
	}
	if fetcher == nil || id.Name == "" || id.Namespace == "" {
		return nil, SourceNone, nil
	}
	ann, err = fetcher.PodAnnotations(ctx, id)
	return ann, SourceAgent, err
}
