package noderepair

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/pkg/atomicfile"
	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
)

// UnknownComment is the comment of the set elements `podwire repair
// --drop-unknown` adds for an interface without a record.
const UnknownComment = "unknown interface: no podwire record"

// UnknownFile (in stateDir) lists the unknown interfaces whose sources
// repair checks, so that their elements are deleted once they are gone.
const UnknownFile = "unknown-interfaces.checked"

// unknownInterfaces finds the node's pod interfaces without a record and,
// for those named in drop, checks their sources as a pod's: a routed veth
// may send only from the addresses the node routes to it, a bridge port
// from none (the node does not know its addresses), so that a pod wired
// while podwire was out of the runtime's chain cannot forge. Elements of
// interfaces dropped before that are gone now are deleted. It runs under
// the node lock, which an ADD holds to write its first record (the plugin's putFirst):
// an interface whose record is written is never dropped here, and an ADD
// whose interface was dropped before its record takes it out again
// (the plugin's forgetUnknown).
func unknownInterfaces(c nft.Conn, conf *config.NetConf, env nodetables.Env, conflist string,
	store *state.Store, want []*nft.Table, drop map[string]bool) ([]cliapi.UnknownInterface, error) {
	unlock, err := store.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	recs, _ := store.List()
	bridges, nets := primaryPodNets(conflist)
	if env.Cluster != nil {
		nets = append(nets, env.Cluster.PodCIDRs...)
	}
	found, err := findUnknown(recs, bridges, nets)
	if err != nil {
		return nil, err
	}
	var dropped []cliapi.UnknownInterface
	add := nft.Elements{}
	for i := range found {
		if drop[found[i].Name] && conf.SourceCheckEnabled() {
			found[i].Dropped = true
			dropped = append(dropped, found[i])
			AddUnknownElements(add, found[i])
		}
	}
	if err := nft.AddElements(c, want, add); err != nil {
		return nil, err
	}
	path := filepath.Join(conf.StateDir, UnknownFile)
	var before []cliapi.UnknownInterface
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &before)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	recorded := map[string]bool{}
	for _, r := range recs {
		recorded[r.HostIfName] = true
	}
	gone := nft.Elements{}
	for _, u := range before {
		still := slices.ContainsFunc(dropped, func(d cliapi.UnknownInterface) bool { return d.Name == u.Name })
		if !still && !recorded[u.Name] {
			AddUnknownElements(gone, u)
		}
	}
	if err := nft.DeleteElements(c, gone); err != nil {
		return nil, err
	}
	if len(dropped) == 0 && len(before) == 0 {
		return found, nil
	}
	b, err := json.Marshal(dropped)
	if err != nil {
		return nil, err
	}
	return found, atomicfile.WriteFile(path, b, 0o600)
}

// Unknown lists the node's pod interfaces without a record, as a repair
// with Options.Unknown would, and changes nothing: the node agent's cheap
// look, after a veth came or went, before it repairs.
func Unknown(conf *config.NetConf, conflist string) ([]cliapi.UnknownInterface, error) {
	recs, _ := state.New(conf.StateDir).List()
	bridges, nets := primaryPodNets(conflist)
	if c, err := nodetables.ReadCluster(conf.StateDir); err == nil && c != nil {
		nets = append(nets, c.PodCIDRs...)
	}
	return findUnknown(recs, bridges, nets)
}

// AddUnknownElements adds u's source-check elements to e.
func AddUnknownElements(e nft.Elements, u cliapi.UnknownInterface) {
	sourcecheck.AddElements(e, sourcecheck.Pod{HostIfName: u.Name, Addresses: u.Addresses,
		Name: UnknownComment, Bridged: u.Bridge != ""})
}

// findUnknown lists the host veths that no record names and that are pod
// interfaces: ports of a bridge in bridges or of a recorded pod's bridge,
// or veths without a master to which the main table routes host addresses
// (/32, /128, no gateway, not the kernel's) inside nets (any, when nets is empty). The dumps
// retry when the kernel's tables change under them (netlinksafe).
func findUnknown(recs []*state.Record, bridges map[string]bool, nets []netip.Prefix) ([]cliapi.UnknownInterface, error) {
	known := map[string]bool{}
	for _, r := range recs {
		known[r.HostIfName] = true
		if r.HostBridge != "" {
			bridges[r.HostBridge] = true
		}
	}
	links, err := netlinksafe.LinkList()
	if err != nil {
		return nil, fmt.Errorf("failed to list links: %w", err)
	}
	routes, err := netlinksafe.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("failed to list routes: %w", err)
	}
	hostRoutes := map[int][]netip.Addr{}
	for _, r := range routes {
		// The kernel's own prefix routes (an IPv6 /128 address makes one)
		// are the node's addresses, not a pod's.
		if r.Dst == nil || r.Gw != nil || r.Protocol == unix.RTPROT_KERNEL {
			continue
		}
		ones, bits := r.Dst.Mask.Size()
		a, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok || ones != bits {
			continue
		}
		a = a.Unmap()
		if len(nets) == 0 || slices.ContainsFunc(nets, func(p netip.Prefix) bool { return p.Contains(a) }) {
			hostRoutes[r.LinkIndex] = append(hostRoutes[r.LinkIndex], a)
		}
	}
	byIndex := map[int]netlink.Link{}
	for _, l := range links {
		byIndex[l.Attrs().Index] = l
	}
	var out []cliapi.UnknownInterface
	for _, l := range links {
		name := l.Attrs().Name
		if l.Type() != "veth" || known[name] {
			continue
		}
		if m := l.Attrs().MasterIndex; m != 0 {
			if br, ok := byIndex[m]; ok && br.Type() == "bridge" && bridges[br.Attrs().Name] {
				out = append(out, cliapi.UnknownInterface{Name: name, Bridge: br.Attrs().Name})
			}
			continue
		}
		if addrs := hostRoutes[l.Attrs().Index]; len(addrs) > 0 {
			slices.SortFunc(addrs, netip.Addr.Compare)
			out = append(out, cliapi.UnknownInterface{Name: name, Addresses: addrs})
		}
	}
	slices.SortFunc(out, func(a, b cliapi.UnknownInterface) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// primaryPodNets reads, from the conflist holding podwire, the bridges its
// plugins put pods on (bridge's "bridge", flannel's delegate's; cni0 when
// unnamed) and the subnets of their host-local IPAM ranges. A conflist that
// cannot be read gives none: the records' bridges and the cluster's pod
// CIDRs still apply.
func primaryPodNets(conflist string) (map[string]bool, []netip.Prefix) {
	bridges := map[string]bool{}
	var nets []netip.Prefix
	b, err := os.ReadFile(conflist)
	if conflist == "" || err != nil {
		return bridges, nil
	}
	type ipam struct {
		Subnet string `json:"subnet"`
		Ranges [][]struct {
			Subnet string `json:"subnet"`
		} `json:"ranges"`
	}
	var list struct {
		Plugins []struct {
			Type     string `json:"type"`
			Bridge   string `json:"bridge"`
			IPAM     ipam   `json:"ipam"`
			Delegate struct {
				Bridge string `json:"bridge"`
			} `json:"delegate"`
		} `json:"plugins"`
	}
	if json.Unmarshal(b, &list) != nil {
		return bridges, nil
	}
	for _, p := range list.Plugins {
		switch p.Type {
		case "bridge":
			bridges[orDefault(p.Bridge, "cni0")] = true
		case "flannel":
			bridges[orDefault(p.Delegate.Bridge, "cni0")] = true
		}
		subnets := []string{p.IPAM.Subnet}
		for _, set := range p.IPAM.Ranges {
			for _, r := range set {
				subnets = append(subnets, r.Subnet)
			}
		}
		for _, s := range subnets {
			if pfx, err := netip.ParsePrefix(s); err == nil {
				nets = append(nets, pfx.Masked())
			}
		}
	}
	return bridges, nets
}

// orDefault is s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
