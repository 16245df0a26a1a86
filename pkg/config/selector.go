package config

import (
	"fmt"
	"slices"
	"strings"
)

// LabelSelector selects Kubernetes namespaces by their labels, in the shape
// and with the meaning of metav1.LabelSelector (k8s.io/apimachinery,
// "Labels and Selectors" in the Kubernetes docs): every matchLabels pair and
// every matchExpressions requirement must hold. An empty selector ({})
// selects every namespace, as in a NetworkPolicy; an absent one, none.
//
//	"namespaceSelector": {"matchLabels": {"podwire.io/forwarding": "true"},
//	  "matchExpressions": [{"key": "team", "operator": "In", "values": ["nf", "edge"]}]}
//
// Labels of a namespace are set by whoever may update the Namespace object,
// a cluster-scoped right that a namespace-scoped RoleBinding cannot grant,
// so a selector gate is not passed by merely naming a namespace like an
// admitted one. The matching is podwire's own (a few lines): importing
// k8s.io/apimachinery/pkg/labels would bring klog and apimachinery's
// validation package into every ADD's process start.
type LabelSelector struct {
	MatchLabels      map[string]string          `json:"matchLabels,omitempty"`
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is one requirement of a LabelSelector: Operator
// is In or NotIn (Values non-empty) or Exists or DoesNotExist (no Values).
type LabelSelectorRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// Operators of a LabelSelectorRequirement.
const (
	OpIn           = "In"
	OpNotIn        = "NotIn"
	OpExists       = "Exists"
	OpDoesNotExist = "DoesNotExist"
)

// Matches reports whether labels satisfy s; a nil s matches nothing.
func (s *LabelSelector) Matches(labels map[string]string) bool {
	if s == nil {
		return false
	}
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, r := range s.MatchExpressions {
		v, ok := labels[r.Key]
		switch r.Operator {
		case OpIn:
			if !ok || !slices.Contains(r.Values, v) {
				return false
			}
		case OpNotIn:
			if ok && slices.Contains(r.Values, v) {
				return false
			}
		case OpExists:
			if !ok {
				return false
			}
		case OpDoesNotExist:
			if ok {
				return false
			}
		default: // refused by validate; never matches
			return false
		}
	}
	return true
}

// String renders s in the Kubernetes selector syntax ("a=b,team in (x,y)"),
// for messages; "{}" selects everything, "<none>" nothing.
func (s *LabelSelector) String() string {
	if s == nil {
		return "<none>"
	}
	var parts []string
	for _, k := range sortedKeys(s.MatchLabels) {
		parts = append(parts, k+"="+s.MatchLabels[k])
	}
	for _, r := range s.MatchExpressions {
		switch r.Operator {
		case OpExists:
			parts = append(parts, r.Key)
		case OpDoesNotExist:
			parts = append(parts, "!"+r.Key)
		default:
			parts = append(parts, fmt.Sprintf("%s %s (%s)", r.Key, strings.ToLower(r.Operator), strings.Join(r.Values, ",")))
		}
	}
	if len(parts) == 0 {
		return "{}"
	}
	return strings.Join(parts, ",")
}

// validate checks s (nil is valid) under key: label keys and values as
// Kubernetes accepts them (IsQualifiedName, IsValidLabelValue), known
// operators with the values each takes.
func (s *LabelSelector) validate(key string) error {
	if s == nil {
		return nil
	}
	for _, k := range sortedKeys(s.MatchLabels) {
		if err := labelKeyError(k); err != "" {
			return Invalid(key+".matchLabels", k, "%s", err)
		}
		if err := labelValueError(s.MatchLabels[k]); err != "" {
			return Invalid(key+".matchLabels."+k, s.MatchLabels[k], "%s", err)
		}
	}
	for i, r := range s.MatchExpressions {
		k := fmt.Sprintf("%s.matchExpressions[%d]", key, i)
		if err := labelKeyError(r.Key); err != "" {
			return Invalid(k+".key", r.Key, "%s", err)
		}
		switch r.Operator {
		case OpIn, OpNotIn:
			if len(r.Values) == 0 {
				return Invalid(k+".values", r.Values, "operator %s needs at least one value", r.Operator)
			}
		case OpExists, OpDoesNotExist:
			if len(r.Values) > 0 {
				return Invalid(k+".values", r.Values, "operator %s takes no values", r.Operator)
			}
		default:
			return Invalid(k+".operator", r.Operator, "is not In, NotIn, Exists or DoesNotExist")
		}
		for j, v := range r.Values {
			if err := labelValueError(v); err != "" {
				return Invalid(fmt.Sprintf("%s.values[%d]", k, j), v, "%s", err)
			}
		}
	}
	return nil
}

// labelKeyError checks a label key: an optional DNS-subdomain prefix (at
// most 253 bytes) and "/", then a name of 1..63 bytes of [A-Za-z0-9-_.]
// starting and ending alphanumeric. "" when valid.
func labelKeyError(k string) string {
	name := k
	if i := strings.LastIndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if prefix == "" || len(prefix) > 253 || strings.TrimLeft(prefix, "abcdefghijklmnopqrstuvwxyz0123456789-.") != "" {
			return "the prefix before '/' is not a DNS subdomain (lower case)"
		}
	}
	if name == "" {
		return "empty label name"
	}
	return labelValueError(name)
}

// labelValueError checks a label value: at most 63 bytes of [A-Za-z0-9-_.],
// empty or starting and ending alphanumeric. "" when valid.
func labelValueError(v string) string {
	if len(v) > 63 {
		return "longer than 63 bytes"
	}
	for i, r := range v {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && ((r != '-' && r != '_' && r != '.') || i == 0 || i == len(v)-1) {
			return fmt.Sprintf("character %q at %d: label names and values are [A-Za-z0-9-_.], starting and ending alphanumeric", r, i)
		}
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Namespace is a pod's Kubernetes namespace as the gates see it: its name
// and, when the config selects namespaces by label, its labels (nil when
// they were not read: no selector then matches).
type Namespace struct {
	Name   string
	Labels map[string]string
}

// NamespaceAdmitted reports whether ns is admitted by name (one of globs,
// path.Match syntax) or by labels (sel). An unknown namespace ("", a pod
// without Kubernetes identity) is admitted by neither.
func NamespaceAdmitted(globs []string, sel *LabelSelector, ns Namespace) bool {
	if ns.Name == "" {
		return false
	}
	return MatchNamespace(globs, ns.Name) || sel.Matches(ns.Labels)
}

// SelectsNamespaces reports whether a gate of c selects namespaces by
// label, so that an ADD must read its pod's namespace labels (from the
// node agent) before the gates run.
func (c *NetConf) SelectsNamespaces() bool {
	if c.Forwarding.NamespaceSelector != nil {
		return true
	}
	for i := range c.VLANGrants {
		if c.VLANGrants[i].NamespaceSelector != nil {
			return true
		}
	}
	return false
}

// validateSelector checks sel under key and warns when it selects every
// namespace.
func (c *NetConf) validateSelector(key string, sel *LabelSelector) error {
	if err := sel.validate(key); err != nil {
		return err
	}
	if sel != nil && len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
		c.Warnings = append(c.Warnings, key+" is {}: it selects every namespace")
	}
	return nil
}

// ValidateLabelKey checks a Kubernetes label or taint key (an optional
// DNS-subdomain prefix and "/", then a name of 1..63 bytes).
func ValidateLabelKey(k string) error {
	if e := labelKeyError(k); e != "" {
		return fmt.Errorf("%q is not a label key: %s", k, e)
	}
	return nil
}
