// Package state keeps one record per CNI attachment (container ID + ifname)
// in podwire's stateDir, and the node lock. DEL and GC work from these
// records, so they need neither prevResult nor the pod's netns; the node
// tables are rebuilt from them.
//
// Records are JSON files, mode 0600, in a directory of mode 0700, written
// atomically (temporary file, fsync, rename). A record is written before ADD
// changes anything (with everything ADD is about to create) and updated when
// ADD is done, so a runtime's DEL after a crashed ADD still finds what to
// remove.
package state

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/podwire/podwire/pkg/vrrp"
)

// RecordVersion is the schema version of Record that this podwire writes.
// Fields are only ever added, so a record of an older version (or of none:
// 0, written before versions were checked) reads as it is. A record of a
// newer version may hold what this podwire would ignore and so undo wrongly
// (a downgrade while pods run): reading it fails, naming both versions.
//
//	1: the first schema.
//	2: hostBridge, unchecked (a bridged pod's elements are in bridge
//	   podwire, not inet podwire).
const RecordVersion = 2

// Record is what podwire did for one attachment. Each concern fills its own
// fields; every field names something DEL must undo.
type Record struct {
	Version     int    `json:"version"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	// Netns is the pod's netns path at ADD; it may be gone at DEL.
	Netns string `json:"netns,omitempty"`
	// Network is the network name of the conflist.
	Network string    `json:"network,omitempty"`
	Created time.Time `json:"created"`
	// Complete is false while ADD is still running (or crashed).
	Complete bool `json:"complete"`

	PodNamespace string `json:"podNamespace,omitempty"`
	PodName      string `json:"podName,omitempty"`
	PodUID       string `json:"podUID,omitempty"`
	// AnnotationSource is podmeta.SourceRuntime, SourceAgent or SourceNone.
	AnnotationSource string `json:"annotationSource,omitempty"`

	// HostIfName is the host side of the primary interface (the veth the
	// primary plugin made).
	HostIfName string `json:"hostIfName,omitempty"`
	// Addresses are the pod's primary addresses, from prevResult.
	Addresses []netip.Addr `json:"addresses,omitempty"`
	// HostBridge is the Linux bridge HostIfName is a port of (flannel's
	// cni0, the bridge plugin): the pod's source-check elements are then in
	// "bridge podwire", keyed by port, instead of "inet podwire".
	HostBridge string `json:"hostBridge,omitempty"`
	// Unchecked says why podwire cannot check the pod's sources (no host
	// interface, an Open vSwitch port); "" when it can.
	Unchecked string `json:"unchecked,omitempty"`

	// SourceCheck is true when the pod's addresses are elements of the
	// source-check sets (an ordinary pod with sourceCheck on).
	SourceCheck bool `json:"sourceCheck,omitempty"`
	// Forwarding marks an admitted forwarding pod.
	Forwarding bool `json:"forwarding,omitempty"`
	// AllowedSourcePrefixes are elements of the allowed-prefix sets.
	AllowedSourcePrefixes []netip.Prefix `json:"allowedSourcePrefixes,omitempty"`
	// Routes are node routes to the pod (podwire.io/routes).
	Routes []Route `json:"routes,omitempty"`
	// HostSysctls are host-side sysctls podwire changed, with the values
	// they had before, restored on DEL (path relative to /proc/sys).
	HostSysctls map[string]string `json:"hostSysctls,omitempty"`
	// Egress is true when the pod's addresses are egress SNAT sources.
	Egress bool `json:"egress,omitempty"`

	// VLAN is the VLAN attachment, if any.
	VLAN *VLANAttachment `json:"vlan,omitempty"`
}

// Route is one node route to a pod (podwire.io/routes): Dst via the pod's
// address Via (same family) on the pod's host-side interface Dev.
type Route struct {
	Dst netip.Prefix `json:"dst"`
	Via netip.Addr   `json:"via"`
	Dev string       `json:"dev,omitempty"`
}

func (r Route) String() string { return fmt.Sprintf("%s via %s dev %s", r.Dst, r.Via, r.Dev) }

// VLANAttachment is a pod's port on the node bridge.
type VLANAttachment struct {
	Bridge    string `json:"bridge"`
	HostVeth  string `json:"hostVeth"`
	PodIfName string `json:"podIfName"`
	// PVID is the untagged (access or native) VLAN; 0 for none.
	PVID uint16 `json:"pvid,omitempty"`
	// Tagged are trunk VLANs.
	Tagged []uint16 `json:"tagged,omitempty"`
	// Uplink is the trunk the VLANs were added to; "" for none.
	Uplink string         `json:"uplink,omitempty"`
	MAC    string         `json:"mac,omitempty"`
	MTU    int            `json:"mtu,omitempty"`
	IPs    []netip.Prefix `json:"ips,omitempty"`
	// PortCheck is true when bridge-family elements pin MAC and IPs.
	PortCheck bool `json:"portCheck,omitempty"`
	// PortMACOnly is true when the port check pins the MAC alone on an
	// access port: podwire assigned the pod no address there (allowedVLANs,
	// or a grant without subnets), so any IP source passes. A trunk port
	// (Tagged) is pinned to its MAC alone whatever this says.
	PortMACOnly bool `json:"portMACOnly,omitempty"`
	// VRRP are the virtual routers granted to the pod (podwire.io/vrrp):
	// the port check lets the port send from their virtual MACs and, on a
	// checked port, from their virtual addresses.
	VRRP []vrrp.Group `json:"vrrp,omitempty"`
}

// VLANs returns every VLAN the attachment uses on the bridge.
func (v *VLANAttachment) VLANs() []uint16 {
	if v == nil {
		return nil
	}
	out := append([]uint16(nil), v.Tagged...)
	if v.PVID != 0 {
		out = append(out, v.PVID)
	}
	return out
}

// Key is "containerID/ifname", the identity of an attachment.
func (r *Record) Key() string { return r.ContainerID + "/" + r.IfName }

// PodRef names the attachment's pod for logs, element comments and `podwire
// status`: "namespace/name", or the Key when the runtime sent no pod name.
func (r *Record) PodRef() string {
	if r.PodName == "" {
		return r.Key()
	}
	return r.PodNamespace + "/" + r.PodName
}
