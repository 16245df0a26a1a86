package main

import (
	"log/slog"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/forwarding"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/primary"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// The node's side of the concerns, one narrow interface each, so that a
// concern reaches only what it needs and a test fakes only that. The Linux
// implementation of all four is linuxLinks (netlink in the calling thread's
// netns unless a pod netns is named; dumps through netlinksafe).

// nodeReader reads what planning, CHECK and STATUS depend on; it changes
// nothing.
type nodeReader interface {
	// tablesEnv reads what the node tables depend on (nodetables.ReadEnv).
	tablesEnv(conf *config.NetConf) nodetables.Env
	// tableWarnings are env's warnings plus an egress IP that is not on
	// the node (nodetables.EnvWarnings: a route lookup per egress IP).
	tableWarnings(env nodetables.Env) []string
	// primary finds what the primary plugin made (primary.FromResult,
	// then primary.PortOf for the bridge the host veth is a port of).
	primary(prevResult *current.Result, ifName, netns string) (*primary.Attachment, error)
	// linkExists fails when the interface name is not in the node's netns.
	linkExists(name string) error
	// checkUplink fails when the uplink cannot carry VLANs: missing, or
	// holding a global address (vlanbridge.CheckUplinkAddresses).
	checkUplink(name string) error
	// vlanEnv reads what planning a VLAN port p with the uplink
	// candidates uplinks (none for no uplink) depends on, the uplink this
	// node uses among them too (vlanbridge.ReadEnv).
	vlanEnv(p *vlanbridge.Port, uplinks []string) vlanbridge.Env
}

// routeTable holds the node routes to forwarding pods (podwire.io/routes).
type routeTable interface {
	addRoutes(routes []forwarding.Route) error
	delRoutes(routes []forwarding.Route) error
	checkRoutes(routes []forwarding.Route) error
}

// vlanWiring makes and removes the node bridge, the uplink trunk and the
// pods' VLAN ports (pkg/vlanbridge).
type vlanWiring interface {
	// ensureTrunk makes the bridge and enslaves the uplink ("" for none)
	// carrying vids tagged (vlanbridge.EnsureTrunk); the caller holds the
	// node lock.
	ensureTrunk(bridge, uplink string, vids []uint16) (*netlink.Bridge, error)
	createPort(br *netlink.Bridge, p *vlanbridge.Port) (*vlanbridge.Created, error)
	// deletePort removes the veth pair; gone already is success.
	deletePort(hostVeth string) error
	removeUplinkVLANs(uplink string, vids []uint16) error
	// checkVLAN verifies the bridge, the port p and the uplink ("" for
	// none) carrying vids (vlanbridge.CheckAttachment).
	checkVLAN(p *vlanbridge.Port, uplink string, vids []uint16) error
}

// announcer has the kernel announce the pod interfaces of ifs whose host
// side shares an L2 segment (package neigh); best effort, each failure
// logged.
type announcer interface {
	announce(netns string, ifs []podHostIf, log *slog.Logger)
}

// podHostIf is a pod interface and the host side of its veth.
type podHostIf struct{ podIf, hostIf string }

// sysctls reads and writes sysctls by their path relative to /proc/sys
// (net/ipv4/conf/eth0/rp_filter), in the node's netns unless a pod netns is
// named. linuxSysctls is the kernel's.
type sysctls interface {
	get(key string) (string, error)
	set(key, value string) error
	// enablePodForwarding turns forwarding on in the pod's netns
	// (forwarding.EnablePod); checkPodForwarding verifies it.
	enablePodForwarding(netns string) error
	checkPodForwarding(netns string) error
	// rpFilterWarning is forwarding.RPFilterWarning of the node.
	rpFilterWarning() string
}
