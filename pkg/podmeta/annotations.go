package podmeta

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/vlan"
	"github.com/podwire/podwire/pkg/vrrp"
)

// The podwire.io annotations (docs/annotations.md).
const (
	AnnotationForwarding      = "podwire.io/forwarding"
	AnnotationAllowedPrefixes = "podwire.io/allowed-source-prefixes"
	AnnotationRoutes          = "podwire.io/routes"
	AnnotationVLAN            = "podwire.io/vlan"
	AnnotationVLANTrunk       = "podwire.io/vlan-trunk"
	AnnotationVLANIfName      = "podwire.io/vlan-ifname"
	AnnotationVLANIPs         = "podwire.io/vlan-ips"
	AnnotationVRRP            = "podwire.io/vrrp"
	// AnnotationEgressIP is a node annotation, read by the node tables.
	AnnotationEgressIP = "podwire.io/egress-ip"
)

// Bounds on annotation values, so that a hostile pod spec cannot make podwire
// build a huge ruleset or route table.
const (
	MaxAnnotationBytes = 16 << 10 // bytes per podwire.io annotation value
	MaxListItems       = 64       // prefixes or addresses per list
)

// Annotations are the typed podwire.io/* annotations of one pod. The zero
// value is an ordinary pod with no VLAN attachment.
type Annotations struct {
	// Forwarding is podwire.io/forwarding: no source check, forwarding on.
	Forwarding bool
	// AllowedSourcePrefixes are extra source prefixes (the check stays).
	AllowedSourcePrefixes []netip.Prefix
	// Routes are prefixes the node routes to the pod.
	Routes []netip.Prefix
	// VLAN is the access VLAN (PVID, untagged); 0 for none.
	VLAN uint16
	// VLANTrunk are tagged VLANs.
	VLANTrunk vlan.Set
	// VLANIfName is the pod-side name of the VLAN interface; "" for the
	// config's podIfName.
	VLANIfName string
	// VLANIPs are static addresses with their prefix length ("192.0.2.10/24").
	VLANIPs []netip.Prefix
	// VRRP are the virtual routers the pod may act as on its access VLAN
	// (podwire.io/vrrp, vrrp.go).
	VRRP []vrrp.Group
	// Multus are the pod's additional networks under Multus
	// (AnnotationMultusNetworks), whose interface names the VLAN interface
	// must not take; nil when the annotation is absent or one Multus
	// refuses itself.
	Multus []MultusAttachment
}

// WantsVLAN reports whether the pod asks for a VLAN attachment.
func (a *Annotations) WantsVLAN() bool { return a.VLAN != 0 || len(a.VLANTrunk) > 0 }

func annotationError(key, value, format string, args ...any) *types.Error {
	if len(value) > 80 {
		value = value[:80] + "..."
	}
	return types.NewError(types.ErrInvalidNetworkConfig,
		fmt.Sprintf("invalid annotation %s %q: %s", key, value, fmt.Sprintf(format, args...)), "")
}

// ParseAnnotations types the podwire.io/* annotations of raw (other keys are
// ignored). Errors are CNI error 7 naming the annotation and its value.
func ParseAnnotations(raw map[string]string) (*Annotations, error) {
	a := &Annotations{}
	for k, v := range raw {
		if strings.HasPrefix(k, "podwire.io/") && len(v) > MaxAnnotationBytes {
			return nil, annotationError(k, v, "value is %d bytes, more than %d", len(v), MaxAnnotationBytes)
		}
	}
	if v, ok := raw[AnnotationForwarding]; ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true":
			a.Forwarding = true
		case "false", "":
		default:
			return nil, annotationError(AnnotationForwarding, v, `must be "true" or "false"`)
		}
	}
	var err error
	if a.AllowedSourcePrefixes, err = parsePrefixList(raw, AnnotationAllowedPrefixes, false); err != nil {
		return nil, err
	}
	if a.Routes, err = parsePrefixList(raw, AnnotationRoutes, false); err != nil {
		return nil, err
	}
	if a.VLANIPs, err = parsePrefixList(raw, AnnotationVLANIPs, true); err != nil {
		return nil, err
	}
	if v, ok := raw[AnnotationVLAN]; ok {
		if a.VLAN, err = vlan.ParseID(v); err != nil {
			return nil, annotationError(AnnotationVLAN, v, "%v", err)
		}
	}
	if v, ok := raw[AnnotationVLANTrunk]; ok {
		if a.VLANTrunk, err = vlan.Parse(v); err != nil {
			return nil, annotationError(AnnotationVLANTrunk, v, "%v", err)
		}
	}
	if v, ok := raw[AnnotationVLANIfName]; ok {
		if err := config.ValidateIfName(v); err != nil {
			return nil, annotationError(AnnotationVLANIfName, v, "%v", err)
		}
		a.VLANIfName = v
	}
	if a.VRRP, err = parseVRRP(raw, a.VLAN); err != nil {
		return nil, err
	}
	if v, ok := raw[AnnotationMultusNetworks]; ok {
		a.Multus, _ = MultusAttachments(v)
	}
	if (len(a.VLANIPs) > 0 || a.VLANIfName != "") && !a.WantsVLAN() {
		key := AnnotationVLANIPs
		if len(a.VLANIPs) == 0 {
			key = AnnotationVLANIfName
		}
		return nil, annotationError(key, raw[key], "needs %s or %s", AnnotationVLAN, AnnotationVLANTrunk)
	}
	return a, nil
}

// SplitList splits an annotation list value: a JSON array of strings
// (`["a","b"]`) or a comma list ("a, b"). Empty items are an error.
func SplitList(v string) ([]string, error) {
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, "[") {
		var items []string
		if err := json.Unmarshal([]byte(v), &items); err != nil {
			return nil, fmt.Errorf("is not a JSON array of strings")
		}
		return items, nil
	}
	if v == "" {
		return nil, nil
	}
	items := strings.Split(v, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
		if items[i] == "" {
			return nil, fmt.Errorf("has an empty item")
		}
	}
	return items, nil
}

// parsePrefixList parses a list annotation of prefixes. With hostAddrs, items
// are interface addresses ("192.0.2.10/24", host bits kept); otherwise
// canonical prefixes.
func parsePrefixList(raw map[string]string, key string, hostAddrs bool) ([]netip.Prefix, error) {
	v, ok := raw[key]
	if !ok {
		return nil, nil
	}
	items, err := SplitList(v)
	if err != nil {
		return nil, annotationError(key, v, "%v", err)
	}
	if len(items) > MaxListItems {
		return nil, annotationError(key, v, "has %d items, more than %d", len(items), MaxListItems)
	}
	out := make([]netip.Prefix, 0, len(items))
	for _, it := range items {
		var p netip.Prefix
		if hostAddrs {
			p, err = netip.ParsePrefix(it)
			if err == nil && (p.Addr().Zone() != "" || !p.Addr().IsGlobalUnicast() && !p.Addr().IsPrivate()) {
				err = fmt.Errorf("is not a unicast address")
			} else if err != nil {
				err = fmt.Errorf("is not an address with prefix length")
			}
		} else {
			p, err = config.ParsePrefix(it)
		}
		if err != nil {
			return nil, annotationError(key, v, "item %q %v", it, err)
		}
		out = append(out, p)
	}
	return out, nil
}
