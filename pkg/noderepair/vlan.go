package noderepair

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// VLANs verifies the node's side of the VLAN wiring of every record
// (the bridge, the pod's bridge port and its VLANs, the uplink enslaved and
// carrying the VLANs: CHECK without the pod's end) and puts back what
// drifted: the bridge
// and the uplink with its VLANs (EnsureTrunk), the port's master and its
// exact VLAN membership (SetPortVLANs). It runs under the node lock, so no
// ADD or DEL changes the shared trunk meanwhile. It returns one line per
// attachment repaired, naming what differed, and the links of the VLAN
// wiring (bridges, ports, uplinks), which the node agent watches for
// changes; a port that is gone (its pod being deleted) is left to the DEL.
func VLANs(store *state.Store) (repaired, links []string, err error) {
	unlock, err := store.Lock()
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	recs, _ := store.List()
	seen := map[string]bool{}
	for _, r := range recs {
		v := r.VLAN
		if v == nil || !r.Complete {
			continue
		}
		for _, l := range []string{v.Bridge, v.HostVeth, v.Uplink} {
			if l != "" && !seen[l] {
				seen[l] = true
				links = append(links, l)
			}
		}
		p := vlanbridge.PortOf(v, r.Netns)
		drift := vlanbridge.CheckAttachmentNode(p, v.Uplink, v.VLANs())
		if drift == nil {
			continue
		}
		port, err := netlinksafe.LinkByName(v.HostVeth)
		if err != nil {
			continue // the pod's port is gone: its DEL cleans up
		}
		br, err := vlanbridge.EnsureTrunk(v.Bridge, v.Uplink, v.VLANs())
		if err != nil {
			return repaired, links, fmt.Errorf("%s: %v: %w", r.PodRef(), drift, err)
		}
		if port.Attrs().MasterIndex != br.Index {
			if err := netlink.LinkSetMaster(port, br); err != nil {
				return repaired, links, fmt.Errorf("%s: failed to put port %q back on bridge %q: %w", r.PodRef(), v.HostVeth, v.Bridge, err)
			}
		}
		if err := vlanbridge.SetPortVLANs(port, p.VLANs); err != nil {
			return repaired, links, fmt.Errorf("%s: %w", r.PodRef(), err)
		}
		if err := vlanbridge.CheckAttachmentNode(p, v.Uplink, v.VLANs()); err != nil {
			return repaired, links, fmt.Errorf("%s: still drifted after the repair: %w", r.PodRef(), err)
		}
		repaired = append(repaired, fmt.Sprintf("%s: %v", r.PodRef(), drift))
	}
	return repaired, links, nil
}
