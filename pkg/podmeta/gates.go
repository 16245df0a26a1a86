package podmeta

import (
	"fmt"
	"strings"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/config"
)

// Admit applies the admin gates of conf to the annotations of the pod id
// (docs/security.md, "Who may do what"), before anything on the node is touched:
//   - the forwarding annotations only in namespaces matching
//     forwarding.namespaces (empty: nowhere);
//   - podwire.io/routes only inside forwarding.routablePrefixes, and
//     podwire.io/allowed-source-prefixes only inside
//     forwarding.sourcePrefixes (empty: refused);
//   - each VLAN only where a vlanGrants entry grants it to the namespace
//     (or in the deprecated allowedVLANs, every namespace), and
//     podwire.io/vlan-ips only inside the subnets of such a grant;
//   - podwire.io/vrrp only with a VRID and addresses such a grant of the
//     access VLAN allows (its vrrp and subnets).
//
// What other pods of the node hold (addresses, routes) is CheckClaims'. A
// refusal is CNI error 7 naming the annotation, the value and the gate
// (the config key).
func Admit(conf *config.NetConf, id Identity, a *Annotations) error {
	if err := admitForwarding(conf, id, a); err != nil {
		return err
	}
	if err := admitVLAN(conf, id, a); err != nil {
		return err
	}
	return admitVRRP(conf, id, a)
}

// refusal is a Refusal (CNI error 7) of the annotation key with value by
// gate (the config key or rule, named in the message), reported to the
// agent as reason (an agentapi.Refusal* value).
func refusal(reason, key string, value any, gate, format string, args ...any) *Refusal {
	return refuse(reason, fmt.Sprintf("annotation %s %q refused by %s: %s",
		key, fmt.Sprint(value), gate, fmt.Sprintf(format, args...)))
}

func admitForwarding(conf *config.NetConf, id Identity, a *Annotations) error {
	fwd := a.Forwarding || len(a.AllowedSourcePrefixes) > 0 || len(a.Routes) > 0
	if fwd && !config.NamespaceAdmitted(conf.Forwarding.Namespaces, conf.Forwarding.NamespaceSelector, id.NS()) {
		key, value := AnnotationForwarding, "true"
		switch {
		case a.Forwarding:
		case len(a.Routes) > 0:
			key, value = AnnotationRoutes, joinPrefixes(a.Routes)
		default:
			key, value = AnnotationAllowedPrefixes, joinPrefixes(a.AllowedSourcePrefixes)
		}
		gate := "forwarding.namespaces"
		if sel := conf.Forwarding.NamespaceSelector; sel != nil {
			return refusal(agentapi.RefusalForwardingNamespace, key, value, gate+" and forwarding.namespaceSelector",
				"namespace %q does not match %q and its labels are not selected by %q", id.Namespace, conf.Forwarding.Namespaces, sel.String())
		}
		return refusal(agentapi.RefusalForwardingNamespace, key, value, gate, "namespace %q does not match %q",
			id.Namespace, conf.Forwarding.Namespaces)
	}
	for _, r := range a.Routes {
		if !config.PrefixInside(conf.RoutablePrefixes, r) {
			return refusal(agentapi.RefusalRoutablePrefixes, AnnotationRoutes, r, "forwarding.routablePrefixes", "%s is not inside %q",
				r, conf.Forwarding.RoutablePrefixes)
		}
	}
	for _, p := range a.AllowedSourcePrefixes {
		if !config.PrefixInside(conf.SourcePrefixBounds, p) {
			return refusal(agentapi.RefusalSourcePrefixes, AnnotationAllowedPrefixes, p, "forwarding.sourcePrefixes", "%s is not inside %q",
				p, conf.Forwarding.SourcePrefixes)
		}
	}
	return nil
}

func joinPrefixes[P fmt.Stringer](ps []P) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
