// Package config parses, defaults and validates podwire's entry in a CNI
// network configuration list (the keys are in docs/configuration.md).
//
// Every key is optional. A value of the wrong JSON type is CNI error 6
// (decoding failure) naming the key; a value of the right type that is out of
// range or malformed is CNI error 7 (invalid network config) naming the key and
// the value. Unknown keys are tolerated, as the CNI spec asks of plugins.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/podwire/podwire/pkg/vlan"
)

// Defaults for keys left out of the config.
const (
	DefaultStateDir = "/run/podwire"
	// AgentSocketName is the node agent's unix socket in stateDir (agentSocket's default).
	AgentSocketName = "agent.sock"
	// PrimaryTypeName is the file in stateDir where the node agent writes
	// the type of the chain's primary plugin: STATUS, which gets podwire's
	// entry alone, reads what the primary is from it.
	PrimaryTypeName  = "primary-type"
	DefaultBridge    = "podwire0"
	DefaultPodIfName = "net1"

	// PodAnnotationsCapability is the CNI capability through which containerd
	// (>= 1.5) and CRI-O pass the pod's annotations in runtimeConfig.
	PodAnnotationsCapability = "io.kubernetes.cri.pod-annotations"

	// ProbeSNATPresetAzure names the Azure load-balancer health-probe pair.
	ProbeSNATPresetAzure = "azure"
)

// Values of claimScope.
const (
	// ClaimScopeCluster checks a claim against every node's: the plugin
	// asks the node agent, which holds the cluster's claims in ClaimPool
	// objects of the API (the agent's claims.go); no agent or no API, no
	// claim (CNI error 11).
	ClaimScopeCluster = "cluster"
	// ClaimScopeNode checks a claim against this node's records only: for
	// a node without the agent, whose pods share no segment or route with
	// another node's.
	ClaimScopeNode = "node"
)

// SupportedVersions are the CNI spec versions podwire answers to, oldest
// first. 0.3.0 and 0.3.1 are there because the stock conflists of flannel
// (kube-flannel.yml), Calico's install-cni and Cilium's chaining examples
// still declare "cniVersion": "0.3.1": without them no pod on such a node
// could start or be deleted. Results are printed in the version of the
// config (types/040 conversions for 0.3.x and 0.4.0); CHECK is not part of
// 0.3.x, and the CNI library refuses it for those versions before podwire
// runs.
var SupportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// The Azure IPv6 health-probe pair, as AKS deploys it: the probe arrives from
// the link-local FROM address, which the kernel would drop before routing, and
// is rewritten to the global TO address (and back on the way out).
var (
	AzureProbeFrom = netip.MustParseAddr("fe80::1234:5678:9abc")
	AzureProbeTo   = netip.MustParseAddr("2603:1062:0:1:fe80:1234:5678:9abc")
)

// NetConf is podwire's configuration: the JSON keys of podwire's entry plus the
// fields derived from them by Parse (tagged `json:"-"`).
type NetConf struct {
	types.PluginConf

	// RuntimeConfig carries the capability arguments the runtime sent.
	RuntimeConfig RuntimeConfig `json:"runtimeConfig,omitempty"`
	// Attachments is the older spelling of cni.dev/valid-attachments for GC.
	Attachments []types.GCAttachment `json:"cni.dev/attachments,omitempty"`

	LogFile string `json:"logFile,omitempty"`
	// LogFileMaxSize is the size in MiB at which logFile is rotated (default
	// 10); LogFileMaxBackups the rotated files kept (default 5);
	// LogFileMaxAge the days a rotated file is kept (default 0: by count).
	LogFileMaxSize    int    `json:"logFileMaxSize,omitempty"`
	LogFileMaxBackups int    `json:"logFileMaxBackups,omitempty"`
	LogFileMaxAge     int    `json:"logFileMaxAge,omitempty"`
	StateDir          string `json:"stateDir,omitempty"`
	AgentSocket       string `json:"agentSocket,omitempty"`
	// ClaimScope is where a pod's claims (podwire.io/routes,
	// podwire.io/vlan-ips, podwire.io/vrrp) are checked against the other
	// pods': ClaimScopeCluster (the default) or ClaimScopeNode.
	ClaimScope string `json:"claimScope,omitempty"`
	// Kubeconfig and NodeName are retired keys (the plugin makes no API
	// call since the node agent): accepted with a warning and unused.
	Kubeconfig   string      `json:"kubeconfig,omitempty"`
	NodeName     string      `json:"nodeName,omitempty"`
	Bridge       string      `json:"bridge,omitempty"`
	Uplink       string      `json:"uplink,omitempty"`
	MTU          int         `json:"mtu,omitempty"`
	PodIfName    string      `json:"podIfName,omitempty"`
	VLAN         int         `json:"vlan,omitempty"`
	VLANTrunk    string      `json:"vlanTrunk,omitempty"`
	AllowedVLANs string      `json:"allowedVLANs,omitempty"`
	VLANGrants   []VLANGrant `json:"vlanGrants,omitempty"`
	SourceCheck  *bool       `json:"sourceCheck,omitempty"`
	Forwarding   Forwarding  `json:"forwarding,omitempty"`
	ProbeSNAT    *ProbeSNAT  `json:"probeSNAT,omitempty"`
	Egress       *Egress     `json:"egress,omitempty"`

	// Derived by Parse.

	// Result is prevResult converted to the current result type; nil when
	// the runtime sent none (DEL, GC, STATUS, or an unchained ADD).
	Result *current.Result `json:"-"`
	// TrunkVLANs is vlanTrunk parsed; AllowedVLANSet is allowedVLANs parsed
	// (granted to every namespace); GrantedVLANSet is the union of
	// vlanGrants[].vlans.
	TrunkVLANs     vlan.Set `json:"-"`
	AllowedVLANSet vlan.Set `json:"-"`
	GrantedVLANSet vlan.Set `json:"-"`
	// RoutablePrefixes is forwarding.routablePrefixes parsed;
	// SourcePrefixBounds is forwarding.sourcePrefixes parsed.
	RoutablePrefixes   []netip.Prefix `json:"-"`
	SourcePrefixBounds []netip.Prefix `json:"-"`
	// ProbePairs is probeSNAT's preset and rules resolved to address pairs.
	ProbePairs []ProbePair `json:"-"`
	// EgressV4 and EgressV6 are the egress IPs used (the first of each
	// family); invalid (zero) when there is none of that family.
	EgressV4, EgressV6 netip.Addr `json:"-"`
	// ExceptCIDRs is egress.exceptCIDRs parsed; EgressBounds is
	// egress.allowedCIDRs parsed (nil: unbounded).
	ExceptCIDRs  []netip.Prefix `json:"-"`
	EgressBounds []netip.Prefix `json:"-"`
	// Warnings are non-fatal findings for the log (an ignored second egress
	// IP of a family, say).
	Warnings []string `json:"-"`
}

// RuntimeConfig holds the capability arguments podwire declares.
type RuntimeConfig struct {
	// PodAnnotations is the raw io.kubernetes.cri.pod-annotations value:
	// nil when the runtime did not send the key, "null" when the pod has no
	// annotations.
	PodAnnotations json.RawMessage `json:"io.kubernetes.cri.pod-annotations,omitempty"`
}

// Forwarding holds the admin gates for forwarding pods.
type Forwarding struct {
	// Namespaces are path.Match globs of the Kubernetes namespaces in which
	// the forwarding annotations are honoured; empty means nowhere.
	Namespaces []string `json:"namespaces,omitempty"`
	// NamespaceSelector admits the namespaces whose labels it selects,
	// besides those Namespaces names.
	NamespaceSelector *LabelSelector `json:"namespaceSelector,omitempty"`
	// RoutablePrefixes bound what podwire.io/routes may ask for.
	RoutablePrefixes []string `json:"routablePrefixes,omitempty"`
	// SourcePrefixes bound what podwire.io/allowed-source-prefixes may ask
	// for; empty refuses the annotation.
	SourcePrefixes []string `json:"sourcePrefixes,omitempty"`
	// Notrack exempts forwarding pods' transit traffic (neither from nor
	// to their own addresses) from connection tracking (pkg/transit).
	Notrack bool `json:"notrack,omitempty"`
}

// ProbeSNAT configures the stateless load-balancer probe rewrite.
type ProbeSNAT struct {
	Preset     string      `json:"preset,omitempty"`
	Interfaces []string    `json:"interfaces,omitempty"`
	Rules      []ProbeRule `json:"rules,omitempty"`
}

// ProbeRule is one address pair as written in the config.
type ProbeRule struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// ProbePair is a parsed probe address pair of one family: inbound packets
// from From get source To; outbound packets to To get destination From.
type ProbePair struct {
	From, To netip.Addr
}

// Egress configures per-node egress IPs.
type Egress struct {
	IPs            []string `json:"ips,omitempty"`
	ExceptCIDRs    []string `json:"exceptCIDRs,omitempty"`
	NodeAnnotation bool     `json:"nodeAnnotation,omitempty"`
	// AllowedCIDRs bound the egress IPs that egress.ips and the Node
	// annotation podwire.io/egress-ip may name; empty: unbounded.
	AllowedCIDRs []string `json:"allowedCIDRs,omitempty"`
}

// SourceCheckEnabled reports whether the source-IP check is on (the default).
func (c *NetConf) SourceCheckEnabled() bool {
	return c.SourceCheck == nil || *c.SourceCheck
}

// EgressEnabled reports whether egress SNAT is configured at all.
func (c *NetConf) EgressEnabled() bool {
	return c.Egress != nil && (len(c.Egress.IPs) > 0 || c.Egress.NodeAnnotation)
}

// Parse decodes, defaults and validates a config from stdin bytes, and
// converts prevResult (if any) to the current result type. Errors are
// *types.Error with code 6 (wrong JSON type or malformed JSON) or 7 (invalid
// value), naming the key.
func Parse(stdin []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, decodeError(err)
	}
	if conf.StateDir == "" {
		conf.StateDir = DefaultStateDir
	}
	if conf.AgentSocket == "" {
		// Under stateDir: the DaemonSet mounts that one host directory.
		conf.AgentSocket = filepath.Join(conf.StateDir, AgentSocketName)
	}
	if conf.ClaimScope == "" {
		conf.ClaimScope = ClaimScopeCluster
	}
	if conf.Bridge == "" {
		conf.Bridge = DefaultBridge
	}
	if conf.PodIfName == "" {
		conf.PodIfName = DefaultPodIfName
	}
	if err := conf.validate(); err != nil {
		return nil, err
	}
	if conf.RawPrevResult != nil {
		if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
			return nil, types.NewError(types.ErrDecodingFailure, "failed to parse prevResult", err.Error())
		}
		res, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return nil, types.NewError(types.ErrDecodingFailure, "failed to convert prevResult", err.Error())
		}
		conf.Result = res
	}
	return conf, nil
}

// decodeError turns a JSON error into CNI error 6 naming the key.
func decodeError(err error) *types.Error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		key := typeErr.Field
		if key == "" {
			key = "(top level)"
		}
		return types.NewError(types.ErrDecodingFailure,
			fmt.Sprintf("invalid type for key %q: got JSON %s, want %s", key, typeErr.Value, typeErr.Type), "")
	}
	var synErr *json.SyntaxError
	if errors.As(err, &synErr) {
		return types.NewError(types.ErrDecodingFailure,
			fmt.Sprintf("malformed JSON config at byte %d: %v", synErr.Offset, err), "")
	}
	return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("failed to decode config: %v", err), "")
}
