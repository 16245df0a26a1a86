package cluster

import (
	"fmt"
	"strings"
)

// PodEvent is what the suites read of a core/v1 Event about a pod.
type PodEvent struct {
	InvolvedObject struct{ Kind, UID string } `json:"involvedObject"`
	Reason         string                     `json:"reason"`
	Message        string                     `json:"message"`
	Source         struct{ Component string } `json:"source"`
}

// Refusal finds a pod's refusal by podwire in its Events: the message of
// the agent's PodwireRefused Event, and those of the kubelet's
// FailedCreatePodSandBox Events (the runtime's CNI errors, one per sandbox
// tried). ok is false until both are there.
func Refusal(evs []PodEvent) (refused string, sandbox []string, ok bool) {
	for _, e := range evs {
		switch {
		case e.Reason == "PodwireRefused" && e.Source.Component == "podwire-agent":
			refused = e.Message
		case e.Reason == "FailedCreatePodSandBox" && e.Source.Component == "kubelet":
			sandbox = append(sandbox, e.Message)
		}
	}
	return refused, sandbox, refused != "" && len(sandbox) > 0
}

// ChartImage is the chart's image values for a reference pinned by
// digest, REPOSITORY:TAG@sha256:... (what PushArchive returns).
func ChartImage(pinned string) (map[string]any, error) {
	name, digest, ok := strings.Cut(pinned, "@")
	i := strings.LastIndex(name, ":")
	if !ok || i < strings.LastIndex(name, "/") {
		return nil, fmt.Errorf("image reference %q is not REPOSITORY:TAG@DIGEST", pinned)
	}
	return map[string]any{"repository": name[:i], "tag": name[i+1:], "digest": digest}, nil
}
