package podmeta

import (
	"fmt"
	"net/netip"
	"path"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/vlan"
)

// Admit applies the admin gates of conf to the annotations of the pod id
// (DESIGN.md, "Admin gates"): forwarding annotations only in namespaces
// matching forwarding.namespaces (empty: nowhere), routes only inside
// forwarding.routablePrefixes, VLANs only inside allowedVLANs. A refusal is
// CNI error 7 naming the annotation and the config key.
func Admit(conf *config.NetConf, id Identity, a *Annotations) error {
	fwd := a.Forwarding || len(a.AllowedSourcePrefixes) > 0 || len(a.Routes) > 0
	if fwd && !NamespaceAllowed(conf.Forwarding.Namespaces, id.Namespace) {
		key := AnnotationForwarding
		switch {
		case a.Forwarding:
		case len(a.Routes) > 0:
			key = AnnotationRoutes
		default:
			key = AnnotationAllowedPrefixes
		}
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
			"annotation %s refused: namespace %q does not match forwarding.namespaces %q",
			key, id.Namespace, conf.Forwarding.Namespaces), "")
	}
	for _, r := range a.Routes {
		if !insideAny(conf, r) {
			return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
				"annotation %s refused: %s is not inside forwarding.routablePrefixes %q",
				AnnotationRoutes, r, conf.Forwarding.RoutablePrefixes), "")
		}
	}
	asked := a.VLANTrunk
	if a.VLAN != 0 {
		asked = append(vlan.Set{a.VLAN}, asked...)
	}
	if miss := conf.AllowedVLANSet.Missing(asked); len(miss) > 0 {
		key := AnnotationVLANTrunk
		if a.VLAN != 0 && !conf.AllowedVLANSet.Contains(a.VLAN) {
			key = AnnotationVLAN
		}
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
			"annotation %s refused: VLAN %s is not inside allowedVLANs %q",
			key, miss, conf.AllowedVLANs), "")
	}
	return nil
}

// NamespaceAllowed reports whether ns matches one of the globs (path.Match
// syntax). An empty list or an unknown namespace allows nothing.
func NamespaceAllowed(globs []string, ns string) bool {
	if ns == "" {
		return false
	}
	for _, g := range globs {
		if ok, _ := path.Match(g, ns); ok {
			return true
		}
	}
	return false
}

// insideAny reports whether r lies inside one of conf's routable prefixes.
func insideAny(conf *config.NetConf, r netip.Prefix) bool {
	for _, p := range conf.RoutablePrefixes {
		if p.Addr().Is4() == r.Addr().Is4() && p.Bits() <= r.Bits() && p.Contains(r.Addr()) {
			return true
		}
	}
	return false
}
