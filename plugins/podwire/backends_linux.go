package main

import (
	"log/slog"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/forwarding"
	"github.com/podwire/podwire/pkg/neigh"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/primary"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// portUpTimeout bounds the wait for a bridge port to forward before the
// announcement (the link watch work usually ran long before the announcement).
const portUpTimeout = 200 * time.Millisecond

// linuxLinks is nodeReader, routeTable, vlanWiring and announcer over the
// kernel of the calling thread's netns.
type linuxLinks struct{}

func (linuxLinks) tablesEnv(conf *config.NetConf) nodetables.Env { return nodetables.ReadEnv(conf) }

func (linuxLinks) tableWarnings(env nodetables.Env) []string { return nodetables.EnvWarnings(env) }

func (linuxLinks) primary(prevResult *current.Result, ifName, netns string) (*primary.Attachment, error) {
	a, err := primary.FromResult(prevResult, ifName, netns)
	if err != nil {
		return nil, err
	}
	return a, primary.PortOf(a)
}

func (linuxLinks) linkExists(name string) error {
	_, err := netlinksafe.LinkByName(name)
	return err
}

func (linuxLinks) checkUplink(name string) error {
	_, err := vlanbridge.CheckUplinkAddresses(name)
	return err
}

func (linuxLinks) vlanEnv(p *vlanbridge.Port, uplinks []string) vlanbridge.Env {
	return vlanbridge.ReadEnv(p, uplinks)
}

func (linuxLinks) addRoutes(r []forwarding.Route) error   { return forwarding.AddRoutes(r) }
func (linuxLinks) delRoutes(r []forwarding.Route) error   { return forwarding.DelRoutes(r) }
func (linuxLinks) checkRoutes(r []forwarding.Route) error { return forwarding.CheckRoutes(r) }

func (linuxLinks) ensureTrunk(bridge, uplink string, vids []uint16) (*netlink.Bridge, error) {
	return vlanbridge.EnsureTrunk(bridge, uplink, vids)
}

func (linuxLinks) createPort(br *netlink.Bridge, p *vlanbridge.Port) (*vlanbridge.Created, error) {
	return vlanbridge.CreatePort(br, p)
}

func (linuxLinks) deletePort(hostVeth string) error { return vlanbridge.DeletePort(hostVeth) }

func (linuxLinks) removeUplinkVLANs(uplink string, vids []uint16) error {
	return vlanbridge.RemoveUplinkVLANs(uplink, vids)
}

func (linuxLinks) checkVLAN(p *vlanbridge.Port, uplink string, vids []uint16) error {
	return vlanbridge.CheckAttachment(p, uplink, vids)
}

func (linuxLinks) announce(netns string, ifs []podHostIf, log *slog.Logger) {
	var due []string
	for _, c := range ifs {
		host, err := netlinksafe.LinkByName(c.hostIf)
		if err != nil {
			log.Warn("neighbour announcement skipped", "ifname", c.podIf, "hostIf", c.hostIf, "error", err)
			continue
		}
		if !neigh.SharedSegment(host) {
			continue // point-to-point: the host side has no entry to correct
		}
		if err := neigh.WaitOperUp(c.hostIf, portUpTimeout); err != nil {
			log.Warn("announcing before the bridge port forwards", "ifname", c.podIf, "error", err)
		}
		due = append(due, c.podIf)
	}
	if len(due) == 0 {
		return
	}
	err := ns.WithNetNSPath(netns, func(ns.NetNS) error {
		for _, ifName := range due {
			if err := neigh.Announce(ifName); err != nil {
				log.Warn("neighbour announcement failed", "ifname", ifName, "error", err)
			}
		}
		return nil
	})
	if err != nil {
		log.Warn("neighbour announcements skipped", "netns", netns, "error", err)
	}
}

// linuxSysctls is sysctls over /proc/sys of the calling thread's netns.
type linuxSysctls struct{}

func (linuxSysctls) get(key string) (string, error)         { return forwarding.GetSysctl(key) }
func (linuxSysctls) set(key, value string) error            { return forwarding.SetSysctl(key, value) }
func (linuxSysctls) enablePodForwarding(netns string) error { return forwarding.EnablePod(netns) }
func (linuxSysctls) checkPodForwarding(netns string) error  { return forwarding.CheckPod(netns) }
func (linuxSysctls) rpFilterWarning() string                { return forwarding.RPFilterWarning() }
