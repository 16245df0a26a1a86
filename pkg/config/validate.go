package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/vlan"
)

// Limits of a Linux link and of the values podwire accepts.
const (
	// MaxIfNameLen is IFNAMSIZ-1 (include/uapi/linux/if.h).
	MaxIfNameLen = 15
	// MinMTU is ETH_MIN_MTU; MaxMTU is the largest MTU of a veth.
	MinMTU = 68
	MaxMTU = 65535
)

// Invalid returns CNI error 7 naming the key and the offending value.
func Invalid(key string, value any, format string, args ...any) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig,
		fmt.Sprintf("invalid %s %s: %s", key, quote(value), fmt.Sprintf(format, args...)), "")
}

func quote(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%v", v)
}

// ValidateIfName checks a Linux interface name as the kernel's
// dev_valid_name() does (net/core/dev.c): 1..15 bytes, not "." or "..", no
// '/', ':' or white space.
func ValidateIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("interface name is empty")
	case len(name) > MaxIfNameLen:
		return fmt.Errorf("interface name is %d bytes, longer than %d", len(name), MaxIfNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("interface name %q is reserved", name)
	}
	for _, r := range name {
		if r == '/' || r == ':' || r <= ' ' || r == 0x7f || r > 0x7e {
			return fmt.Errorf("interface name contains %q", r)
		}
	}
	return nil
}

// ParseAddr parses a plain IP address; a CIDR is an error (write the address
// alone), as is a zone ("fe80::1%eth0").
func ParseAddr(s string) (netip.Addr, error) {
	if strings.Contains(s, "/") {
		return netip.Addr{}, fmt.Errorf("is a CIDR, a plain address is required")
	}
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("is not an IP address")
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("has a zone, which is not allowed")
	}
	return a.Unmap(), nil
}

// ParsePrefix parses a network prefix in canonical form ("10.0.0.0/8"): a
// plain address is an error (write "/32" or "/128"), as are host bits.
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		return netip.Prefix{}, fmt.Errorf("is an address, a CIDR is required (write %s/32 or /128 for one host)", s)
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("is not a CIDR")
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("is an IPv4-mapped IPv6 prefix")
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("has host bits set (did you mean %s?)", p.Masked())
	}
	return p, nil
}

func (c *NetConf) validate() error {
	for _, p := range []struct{ key, val string }{
		{"logFile", c.LogFile}, {"stateDir", c.StateDir}, {"agentSocket", c.AgentSocket},
	} {
		if p.val != "" && (!filepath.IsAbs(p.val) || filepath.Clean(p.val) != p.val) {
			return Invalid(p.key, p.val, "must be a clean absolute path")
		}
	}
	if c.StateDir == "/" {
		return Invalid("stateDir", c.StateDir, "must not be the root directory")
	}
	if c.ClaimScope != ClaimScopeCluster && c.ClaimScope != ClaimScopeNode {
		return Invalid("claimScope", c.ClaimScope, "must be %q or %q", ClaimScopeCluster, ClaimScopeNode)
	}
	// Retired keys: a conflist written for an older podwire keeps working.
	for _, p := range []struct{ key, val string }{{"kubeconfig", c.Kubeconfig}, {"nodeName", c.NodeName}} {
		if p.val != "" {
			c.Warnings = append(c.Warnings, fmt.Sprintf(
				"%s %q ignored: the plugin makes no Kubernetes API call; the podwire agent (deploy/) serves pod annotations and the node's egress IPs", p.key, p.val))
		}
	}
	for _, p := range []struct{ key, val string }{
		{"bridge", c.Bridge}, {"podIfName", c.PodIfName},
	} {
		if p.val == "" {
			continue
		}
		if err := ValidateIfName(p.val); err != nil {
			return Invalid(p.key, p.val, "%v", err)
		}
	}
	if err := c.validateUplink(); err != nil {
		return err
	}
	for _, l := range []struct {
		key string
		v   int
	}{{"logFileMaxSize", c.LogFileMaxSize}, {"logFileMaxBackups", c.LogFileMaxBackups}, {"logFileMaxAge", c.LogFileMaxAge}} {
		if l.v < 0 {
			return Invalid(l.key, l.v, "must be 0 (the default) or more")
		}
	}
	if c.MTU != 0 && (c.MTU < MinMTU || c.MTU > MaxMTU) {
		return Invalid("mtu", c.MTU, "must be 0 (from the uplink) or %d..%d bytes", MinMTU, MaxMTU)
	}
	if err := c.validateVLANs(); err != nil {
		return err
	}
	if err := c.validateForwarding(); err != nil {
		return err
	}
	if err := c.validateProbeSNAT(); err != nil {
		return err
	}
	if err := c.validateEgress(); err != nil {
		return err
	}
	return c.validateTenancyBounds()
}

func (c *NetConf) validateVLANs() error {
	var err error
	if c.AllowedVLANSet, err = vlan.Parse(c.AllowedVLANs); err != nil {
		return Invalid("allowedVLANs", c.AllowedVLANs, "%v", err)
	}
	if err := c.validateVLANGrants(); err != nil {
		return err
	}
	if c.VLAN != 0 {
		if c.VLAN < vlan.MinID || c.VLAN > vlan.MaxID {
			return Invalid("vlan", c.VLAN, "must be 0 (none) or %d..%d", vlan.MinID, vlan.MaxID)
		}
		if !c.VLANAllowed(uint16(c.VLAN)) {
			return Invalid("vlan", c.VLAN, "is not inside allowedVLANs %q or vlanGrants", c.AllowedVLANs)
		}
	}
	if c.TrunkVLANs, err = vlan.Parse(c.VLANTrunk); err != nil {
		return Invalid("vlanTrunk", c.VLANTrunk, "%v", err)
	}
	var miss vlan.Set
	for _, id := range c.TrunkVLANs {
		if !c.VLANAllowed(id) {
			miss = append(miss, id)
		}
	}
	if len(miss) > 0 {
		return Invalid("vlanTrunk", c.VLANTrunk, "VLANs %s are not inside allowedVLANs %q or vlanGrants", miss, c.AllowedVLANs)
	}
	return nil
}

func (c *NetConf) validateForwarding() error {
	if err := validateNamespaces("forwarding.namespaces", c.Forwarding.Namespaces); err != nil {
		return err
	}
	if err := c.validateSelector("forwarding.namespaceSelector", c.Forwarding.NamespaceSelector); err != nil {
		return err
	}
	for i, s := range c.Forwarding.RoutablePrefixes {
		p, err := ParsePrefix(s)
		if err != nil {
			return Invalid(fmt.Sprintf("forwarding.routablePrefixes[%d]", i), s, "%v", err)
		}
		c.RoutablePrefixes = append(c.RoutablePrefixes, p)
	}
	return nil
}

func (c *NetConf) validateProbeSNAT() error {
	ps := c.ProbeSNAT
	if ps == nil {
		return nil
	}
	switch ps.Preset {
	case "":
	case ProbeSNATPresetAzure:
		c.ProbePairs = append(c.ProbePairs, ProbePair{From: AzureProbeFrom, To: AzureProbeTo})
	default:
		return Invalid("probeSNAT.preset", ps.Preset, "unknown preset (known: %q)", ProbeSNATPresetAzure)
	}
	for i, r := range ps.Rules {
		from, err := ParseAddr(r.From)
		if err != nil {
			return Invalid(fmt.Sprintf("probeSNAT.rules[%d].from", i), r.From, "%v", err)
		}
		to, err := ParseAddr(r.To)
		if err != nil {
			return Invalid(fmt.Sprintf("probeSNAT.rules[%d].to", i), r.To, "%v", err)
		}
		if from.Is4() != to.Is4() {
			return Invalid(fmt.Sprintf("probeSNAT.rules[%d]", i), r.From+" -> "+r.To, "mixes IPv4 and IPv6")
		}
		if from == to {
			return Invalid(fmt.Sprintf("probeSNAT.rules[%d]", i), r.From+" -> "+r.To, "rewrites an address to itself")
		}
		c.ProbePairs = append(c.ProbePairs, ProbePair{From: from, To: to})
	}
	seen := map[netip.Addr]bool{}
	for _, p := range c.ProbePairs {
		if seen[p.From] {
			return Invalid("probeSNAT.rules", p.From.String(), "the same from address appears twice")
		}
		seen[p.From] = true
	}
	if len(c.ProbePairs) == 0 {
		return Invalid("probeSNAT", "{}", "needs a preset or rules")
	}
	for i, name := range ps.Interfaces {
		if err := ValidateIfName(name); err != nil {
			return Invalid(fmt.Sprintf("probeSNAT.interfaces[%d]", i), name, "%v", err)
		}
	}
	return nil
}

func (c *NetConf) validateEgress() error {
	eg := c.Egress
	if eg == nil {
		return nil
	}
	for i, s := range eg.IPs {
		key := fmt.Sprintf("egress.ips[%d]", i)
		a, err := ParseAddr(s)
		if err != nil {
			return Invalid(key, s, "%v", err)
		}
		if !a.IsGlobalUnicast() {
			return Invalid(key, s, "must be a global unicast address")
		}
		switch {
		case a.Is4() && !c.EgressV4.IsValid():
			c.EgressV4 = a
		case a.Is6() && !c.EgressV6.IsValid():
			c.EgressV6 = a
		default:
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s %q ignored: only the first egress IP of each family is used", key, s))
		}
	}
	for i, s := range eg.ExceptCIDRs {
		p, err := ParsePrefix(s)
		if err != nil {
			return Invalid(fmt.Sprintf("egress.exceptCIDRs[%d]", i), s, "%v", err)
		}
		c.ExceptCIDRs = append(c.ExceptCIDRs, p)
	}
	return nil
}
