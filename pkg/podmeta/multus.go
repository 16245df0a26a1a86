package podmeta

import (
	"encoding/json"
	"fmt"
	"strings"
)

// AnnotationMultusNetworks is Multus's network selection annotation (the
// Network Plumbing Working Group's multi-net-spec, section 4.1.2): the
// pod's additional networks, each a NetworkAttachmentDefinition. podwire
// reads it for the interface names Multus will give them, since its own
// VLAN interface is made first, during the cluster network's ADD, and a
// later attachment of the same name fails the pod's sandbox after podwire
// has wired it.
const AnnotationMultusNetworks = "k8s.v1.cni.cncf.io/networks"

// multusSelection is an element of the annotation's JSON form (only the
// keys that name the attachment and its interface).
type multusSelection struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Interface string `json:"interface"`
}

// MultusAttachment is one additional network of a pod under Multus: the
// NetworkAttachmentDefinition it names ("namespace/name", or "name" in the
// pod's namespace) and the interface Multus gives it in the pod.
type MultusAttachment struct {
	Network   string
	Interface string
}

// MultusAttachments parses v, the value of AnnotationMultusNetworks, into
// the pod's additional networks with the interface name Multus gives each
// (multus-cni v4, pkg/k8sclient parsePodNetworkAnnotation and pkg/multus
// getIfname): the one the element asks for ("interface" in the JSON form,
// "@ifname" in the comma form "namespace/name@ifname"), else "net<i>" for
// the i-th element, counted from 1, since the cluster network is Multus's
// delegate 0. A value Multus would refuse is an error; Multus then fails
// the pod itself, so callers treat it as no attachments.
func MultusAttachments(v string) ([]MultusAttachment, error) {
	var sel []multusSelection
	if strings.ContainsAny(v, `[{"`) {
		if err := json.Unmarshal([]byte(v), &sel); err != nil {
			return nil, fmt.Errorf("is not Multus's JSON list of networks: %w", err)
		}
	} else {
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			ns, name, ok := strings.Cut(item, "/")
			if !ok {
				ns, name = "", item
			}
			name, ifName, _ := strings.Cut(name, "@")
			if name == "" || strings.ContainsAny(ns, "@/") || strings.Contains(name, "/") || strings.Contains(ifName, "@") {
				return nil, fmt.Errorf("item %q is not namespace/name@interface", item)
			}
			sel = append(sel, multusSelection{Name: name, Namespace: ns, Interface: ifName})
		}
	}
	out := make([]MultusAttachment, 0, len(sel))
	for i, s := range sel {
		a := MultusAttachment{Network: s.Name, Interface: s.Interface}
		if s.Namespace != "" {
			a.Network = s.Namespace + "/" + s.Name
		}
		if a.Interface == "" {
			a.Interface = fmt.Sprintf("net%d", i+1)
		}
		out = append(out, a)
	}
	return out, nil
}
