package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// NodeOptions names the node resources RemoveNode takes away; they come
// from the podwire entry (defaults applied by config.Parse).
type NodeOptions struct {
	// StateDir is the attachment records' directory.
	StateDir string
	// Bridge is the node bridge; it is deleted only when marked as
	// podwire's (alias vlanbridge.Alias) and no pod port is left on it.
	Bridge string
	// Uplink is the config's uplink key: the NIC candidates, one of which
	// podwire enslaved to the bridge as a trunk; it is released (never
	// deleted) when the bridge goes.
	Uplink string
	// Force removes the node resources even while attachments are recorded
	// (their pods lose source checks and egress SNAT at once).
	Force bool
}

// NodeResult reports what RemoveNode removed.
type NodeResult struct {
	// Conflists and Binary are the files FinishUninstall changed or
	// removed.
	Conflists []string `json:"conflists,omitempty"`
	Binary    string   `json:"binary,omitempty"`
	Tables    []string `json:"tables,omitempty"`
	Bridge    string   `json:"bridge,omitempty"`
	Uplink    string   `json:"uplink,omitempty"`
	StateDir  string   `json:"stateDir,omitempty"`
	// Kept explains what was left in place and why.
	Kept []string `json:"kept,omitempty"`
}

// RemoveNode removes podwire's node-wide resources in the current network
// namespace: every nftables table whose name starts with nft.OwnerPrefix
// (one batch; other tables are never touched), the node bridge if it is
// ours and has no pod ports (an uplink we enslaved is released first), and
// the state dir. It refuses while attachments are recorded, unless Force:
// uninstalling under running pods is a decision for the operator. Missing
// pieces are not errors, so a second run changes nothing.
func RemoveNode(o NodeOptions) (*NodeResult, error) {
	res := &NodeResult{}
	if _, err := os.Stat(o.StateDir); err == nil {
		// The node lock before the check of the records: an ADD writes
		// its first record under it, so one that wrote before is seen
		// here and one that writes after waits until stateDir is gone
		// (and finds no tables to rebuild under us meanwhile).
		unlock, err := state.New(o.StateDir).Lock()
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	if !o.Force {
		if err := CheckNoAttachments(o.StateDir); err != nil {
			return nil, err
		}
	}
	if err := removeNodeLocked(o, res); err != nil {
		return nil, err
	}
	return res, nil
}

// FinishUninstall is the last step of an uninstall on a node, run under the
// node lock (the caller holds it) by the plugin's DEL and GC and by the
// agent that wrote the marker: when stateDir holds the uninstall marker
// (UninstalledName) and no attachment is recorded, it takes podwire out of
// the chain (RemoveFromChain of chain, or of the marker's paths when chain
// is nil), then removes the plugin binary at binary ("" keeps binaries;
// Linux lets a running executable unlink itself: the plugin passes its own
// path) and what RemoveNode removes (the tables, the bridge if podwire made
// it, stateDir with the marker). Without the marker it does nothing. While
// attachments are recorded, or when a record cannot be read (a record might
// name a pod), it removes nothing and says why in Kept: those pods keep
// their checks, and their DEL needs the entry and the binary. done reports
// whether the node was cleaned.
func FinishUninstall(o NodeOptions, chain *Marker, binary string) (res *NodeResult, done bool, err error) {
	res = &NodeResult{}
	m, err := ReadMarker(o.StateDir)
	if err != nil {
		res.Kept = append(res.Kept, fmt.Sprintf("everything: %v", err))
		return res, false, nil
	}
	if m == nil {
		return res, false, nil
	}
	if chain == nil {
		chain = m
	}
	recs, err := state.New(o.StateDir).List()
	if err != nil {
		res.Kept = append(res.Kept, fmt.Sprintf("everything: the records in %q cannot all be read (%v)", o.StateDir, err))
		return res, false, nil
	}
	if len(recs) > 0 {
		res.Kept = append(res.Kept, fmt.Sprintf("everything: %d attachments still recorded in %q", len(recs), o.StateDir))
		return res, false, nil
	}
	// The entry before the binary (no conflist may name a missing
	// plugin), the binary before stateDir: until stateDir (and the marker
	// in it) is gone, a later DEL can finish what a failure here leaves.
	if res.Conflists, err = RemoveFromChain(chain.Conflists, chain.Derived); err != nil {
		return res, false, err
	}
	if binary != "" {
		if err := os.Remove(binary); err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, false, fmt.Errorf("failed to remove binary %q: %w", binary, err)
		} else if err == nil {
			res.Binary = binary
		}
	}
	if err := removeNodeLocked(o, res); err != nil {
		return res, false, err
	}
	return res, true, nil
}

// removeNodeLocked is RemoveNode's work, under the node lock.
func removeNodeLocked(o NodeOptions, res *NodeResult) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("failed to open nftables netlink socket: %w", err)
	}
	gone, err := nodetables.RemoveAll(conn)
	if err != nil {
		return err
	}
	for _, id := range gone {
		res.Tables = append(res.Tables, id.String())
	}

	if err := removeBridge(o.Bridge, o.Uplink, res); err != nil {
		return err
	}

	if o.StateDir != "" {
		removed, err := removeStateDir(o.StateDir)
		if err != nil {
			return err
		}
		if removed {
			res.StateDir = o.StateDir
		}
	}
	return nil
}

// removeStateDir removes stateDir and everything in it; removed is false
// when there was none. When stateDir is a mount point that cannot go (the
// agent's container sees the node's /run/podwire as a hostPath volume,
// under a read-only root: unlinkat fails with EROFS or EBUSY), its content
// is removed and the empty directory stays on the node (in /run, a tmpfs:
// gone at the next boot).
func removeStateDir(dir string) (removed bool, err error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to read state dir %q: %w", dir, err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return false, fmt.Errorf("failed to empty state dir %q: %w", dir, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EBUSY) {
		return false, fmt.Errorf("failed to remove state dir %q: %w", dir, err)
	}
	return true, nil
}

// CheckNoAttachments fails, naming the pods, when attachments are recorded
// in stateDir (or the records cannot be read): removing the node resources
// would take their source checks and egress SNAT away at once.
func CheckNoAttachments(stateDir string) error {
	recs, err := state.New(stateDir).List()
	if err != nil {
		return fmt.Errorf("failed to list attachments in %q (pass --force to remove anyway): %w", stateDir, err)
	}
	if len(recs) > 0 {
		var pods []string
		for _, r := range recs {
			pods = append(pods, r.PodRef())
		}
		return fmt.Errorf("%d attachments still recorded in %q (%s): delete those pods first, or pass --force", len(recs), stateDir, strings.Join(pods, ", "))
	}
	return nil
}

// removeBridge deletes the node bridge when it is ours and only the uplink
// (if any: a candidate of uplink, the config's key) is enslaved to it; the
// uplink is released first.
func removeBridge(name, uplink string, res *NodeResult) error {
	if name == "" {
		return nil
	}
	br, err := netlinksafe.LinkByName(name)
	if err != nil {
		if errors.As(err, &netlink.LinkNotFoundError{}) {
			return nil // gone already
		}
		return fmt.Errorf("failed to look up bridge %q: %w", name, err)
	}
	if br.Type() != "bridge" || br.Attrs().Alias != vlanbridge.Alias {
		res.Kept = append(res.Kept, fmt.Sprintf("link %q: not a bridge podwire made (alias %q)", name, br.Attrs().Alias))
		return nil
	}
	links, err := netlinksafe.LinkList()
	if err != nil {
		return fmt.Errorf("failed to list links: %w", err)
	}
	// Any candidate that is a port is the uplink ADD chose on this node.
	uplinks, _ := config.ParseUplinks(uplink)
	var enslaved, ports []netlink.Link
	for _, l := range links {
		if l.Attrs().MasterIndex != br.Attrs().Index {
			continue
		}
		if slices.Contains(uplinks, l.Attrs().Name) {
			enslaved = append(enslaved, l)
		} else {
			ports = append(ports, l)
		}
	}
	if len(ports) > 0 {
		var names []string
		for _, p := range ports {
			names = append(names, p.Attrs().Name)
		}
		res.Kept = append(res.Kept, fmt.Sprintf("bridge %q: ports left (%s)", name, strings.Join(names, ", ")))
		return nil
	}
	for _, u := range enslaved {
		if err := netlink.LinkSetNoMaster(u); err != nil {
			return fmt.Errorf("failed to release uplink %q from bridge %q: %w", u.Attrs().Name, name, err)
		}
		res.Uplink = u.Attrs().Name
	}
	if err := netlink.LinkDel(br); err != nil {
		return fmt.Errorf("failed to delete bridge %q: %w", name, err)
	}
	res.Bridge = name
	return nil
}
