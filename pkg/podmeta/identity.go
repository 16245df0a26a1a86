// Package podmeta gives podwire the pod behind a CNI invocation: its identity
// from CNI_ARGS, its annotations from the runtime (the
// io.kubernetes.cri.pod-annotations capability) or, as a fallback, from the
// Kubernetes API, and the typed podwire.io/* annotations with the admin gates
// of the config applied.
package podmeta

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/config"
)

// Identity is the Kubernetes pod a CNI invocation is for. Fields are empty
// when the runtime did not send them (cnitool, a bare runtime).
type Identity struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
	// NamespaceLabels are the namespace's labels, read from the node agent
	// only when a gate selects namespaces by label (nil: not read).
	NamespaceLabels map[string]string `json:"-"`
}

// NS is the pod's namespace as the gates see it.
func (id Identity) NS() config.Namespace {
	return config.Namespace{Name: id.Namespace, Labels: id.NamespaceLabels}
}

// String is "namespace/name", or "" for an unknown pod.
func (id Identity) String() string {
	if id.Name == "" {
		return ""
	}
	return id.Namespace + "/" + id.Name
}

// k8sArgs are the CNI_ARGS keys the kubelet and CRI runtimes send.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive
	K8S_POD_UID                types.UnmarshallableString //nolint:revive
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive
}

// IdentityFromArgs reads the pod identity from CNI_ARGS
// ("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u", keys in
// any order). Unknown keys are ignored. A malformed string is CNI error 4.
func IdentityFromArgs(args string) (Identity, error) {
	var a k8sArgs
	a.IgnoreUnknown = true
	if err := types.LoadArgs(args, &a); err != nil {
		return Identity{}, types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("invalid CNI_ARGS %q", clip(args)), clip(err.Error()))
	}
	return Identity{
		Namespace: string(a.K8S_POD_NAMESPACE),
		Name:      string(a.K8S_POD_NAME),
		UID:       string(a.K8S_POD_UID),
	}, nil
}

// maxEcho bounds how much of a bad input an error message repeats: CNI_ARGS
// may be up to 128 KiB, and the runtime logs and events carry the message.
const maxEcho = 200

// clip shortens s to maxEcho bytes for an error message.
func clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return s[:maxEcho] + fmt.Sprintf("... (%d bytes)", len(s))
}

// RuntimeAnnotations decodes the raw io.kubernetes.cri.pod-annotations value.
// sent is false when the runtime did not send the key at all (then the API
// fallback may apply); a JSON null is sent with no annotations. A value that is
// not a string map is CNI error 6.
func RuntimeAnnotations(raw json.RawMessage) (ann map[string]string, sent bool, err error) {
	if len(raw) == 0 {
		return nil, false, nil
	}
	if err := json.Unmarshal(raw, &ann); err != nil {
		return nil, true, types.NewError(types.ErrDecodingFailure,
			"invalid runtimeConfig key \"io.kubernetes.cri.pod-annotations\": want an object of strings", err.Error())
	}
	return ann, true, nil
}
