package main

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/forwarding"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nft/nftfake"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/primary"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// fakeLinks is the node's links, routes and announcements in memory: a
// nodeReader, routeTable and announcer.
type fakeLinks struct {
	hostIfs   map[string]bool
	routes    map[string]bool
	announced []podHostIf
	// failAddRoutes makes addRoutes fail after adding nothing.
	failAddRoutes error
}

// fakeVLAN is the VLAN wiring: making bridges, trunks and ports is not
// faked (it fails, saying so: the VM suite proves it); what DEL removes is
// recorded: deletedPorts, and removedVLANs (uplink -> VLAN IDs).
type fakeVLAN struct {
	deletedPorts []string
	removedVLANs map[string][]uint16
}

var errVLANNotFaked = errors.New("VLAN wiring is not faked: the VM suite proves it")

func (f *fakeVLAN) ensureTrunk(string, string, []uint16) (*netlink.Bridge, error) {
	return nil, errVLANNotFaked
}

func (f *fakeVLAN) createPort(*netlink.Bridge, *vlanbridge.Port) (*vlanbridge.Created, error) {
	return nil, errVLANNotFaked
}

func (f *fakeVLAN) checkVLAN(*vlanbridge.Port, string, []uint16) error { return errVLANNotFaked }

func (f *fakeVLAN) deletePort(hostVeth string) error {
	f.deletedPorts = append(f.deletedPorts, hostVeth)
	return nil
}

func (f *fakeVLAN) removeUplinkVLANs(uplink string, vids []uint16) error {
	f.removedVLANs[uplink] = append(f.removedVLANs[uplink], vids...)
	return nil
}

func newFakeLinks(hostIfs ...string) *fakeLinks {
	f := &fakeLinks{hostIfs: map[string]bool{}, routes: map[string]bool{}}
	for _, n := range hostIfs {
		f.hostIfs[n] = true
	}
	return f
}

func (f *fakeLinks) tablesEnv(conf *config.NetConf) nodetables.Env {
	return nodetables.Env{Egress4: conf.EgressV4, Egress6: conf.EgressV6}
}

func (f *fakeLinks) tableWarnings(env nodetables.Env) []string { return env.Warnings }

// primary needs prevResult to name the host veth (the netns is not read).
func (f *fakeLinks) primary(res *current.Result, ifName, _ string) (*primary.Attachment, error) {
	var host []string
	for _, i := range res.Interfaces {
		if i.Sandbox == "" {
			host = append(host, i.Name)
		}
	}
	if len(host) != 1 {
		return nil, fmt.Errorf("fake: prevResult names %d host interfaces", len(host))
	}
	return primary.FromResult(res, ifName, "")
}

func (f *fakeLinks) linkExists(name string) error {
	if !f.hostIfs[name] {
		return errors.New("fake: link not found")
	}
	return nil
}

func (f *fakeLinks) checkUplink(name string) error { return f.linkExists(name) }

func (f *fakeLinks) addRoutes(rs []forwarding.Route) error {
	if f.failAddRoutes != nil {
		return f.failAddRoutes
	}
	for _, r := range rs {
		f.routes[r.String()] = true
	}
	return nil
}

// delRoutes: a route that is gone is success, as in forwarding.DelRoutes.
func (f *fakeLinks) delRoutes(rs []forwarding.Route) error {
	for _, r := range rs {
		delete(f.routes, r.String())
	}
	return nil
}

func (f *fakeLinks) checkRoutes(rs []forwarding.Route) error {
	for _, r := range rs {
		if !f.routes[r.String()] {
			return fmt.Errorf("route %s missing", r)
		}
	}
	return nil
}

func (f *fakeLinks) announce(_ string, ifs []podHostIf, _ *slog.Logger) {
	f.announced = append(f.announced, ifs...)
}

// fakeSysctls are sysctls in memory: the node's by key, and the pod netns
// paths where forwarding was enabled.
type fakeSysctls struct {
	node      map[string]string
	podFwd    map[string]bool
	failPodOn error
}

func newFakeSysctls() *fakeSysctls {
	return &fakeSysctls{node: map[string]string{}, podFwd: map[string]bool{}}
}

func (f *fakeSysctls) get(key string) (string, error) {
	v, ok := f.node[key]
	if !ok {
		return "", fmt.Errorf("fake sysctl %s: %w", key, forwarding.ErrNoSysctl)
	}
	return v, nil
}

func (f *fakeSysctls) set(key, value string) error {
	if _, ok := f.node[key]; !ok {
		return fmt.Errorf("fake sysctl %s: %w", key, forwarding.ErrNoSysctl)
	}
	f.node[key] = value
	return nil
}

func (f *fakeSysctls) enablePodForwarding(netns string) error {
	if f.failPodOn != nil {
		return f.failPodOn
	}
	f.podFwd[netns] = true
	return nil
}

func (f *fakeSysctls) checkPodForwarding(netns string) error {
	if !f.podFwd[netns] {
		return fmt.Errorf("pod netns %s does not forward", netns)
	}
	return nil
}

func (f *fakeSysctls) rpFilterWarning() string { return "" }

// flakyConn fails the flush numbered failAt (1-based) of its nftfake.Conn.
type flakyConn struct {
	*nftfake.Conn
	flushes, failAt int
}

func (c *flakyConn) Flush() error {
	c.flushes++
	if c.flushes == c.failAt {
		c.Conn.Discard()
		return errors.New("fake: flush refused")
	}
	return c.Conn.Flush()
}

// present returns the elements of e that are in c's sets.
func present(c *nftfake.Conn, e nft.Elements) nft.Elements {
	have := c.Elements()
	out := nft.Elements{}
	for id, sets := range e {
		for name, els := range sets {
			for _, el := range els {
				if slices.ContainsFunc(have[id][name], func(h nftables.SetElement) bool { return string(h.Key) == string(el.Key) }) {
					out.Add(id, name, el)
				}
			}
		}
	}
	return out
}

// vlanEnv: no name clash, no bridge yet, no uplink MTU (an ADD that needs
// the VLAN wiring then fails in fakeVLAN, saying it is not faked).
func (f *fakeLinks) vlanEnv(*vlanbridge.Port, []string) vlanbridge.Env { return vlanbridge.Env{} }
