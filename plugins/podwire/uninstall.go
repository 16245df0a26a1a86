package main

import (
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/state"
	"path/filepath"

	"github.com/podwire/podwire/pkg/install"
)

// finishUninstall runs after a DEL or GC: when the node agent marked an
// uninstall (install.UninstalledName in stateDir) and no attachment is
// recorded any more, it takes podwire's entry out of the conflists the
// marker names, then removes this very binary, the node tables, the bridge
// if podwire made it and stateDir, under the node lock
// (install.FinishUninstall). Until then the entry and the binary stay: the
// runtime runs each remaining pod's DEL through them. Its failure is
// logged and does not fail the verb: the attachment itself is gone.
func (s *session) finishUninstall() {
	if !install.Uninstalled(s.conf.StateDir) {
		return // one stat: the common case
	}
	unlock, err := s.lock.Lock()
	if err != nil {
		s.log.Error("uninstall: failed to take the node lock", "error", err)
		return
	}
	defer unlock()
	bin, err := os.Executable()
	if err != nil || filepath.Base(bin) != install.PluginType {
		// Not run as a runtime runs it (BinDir/podwire): keep binaries.
		s.log.Warn("uninstall: not removing the plugin binary", "executable", bin, "error", err)
		bin = ""
	}
	res, done, err := install.FinishUninstall(install.NodeOptions{StateDir: s.conf.StateDir, Bridge: s.conf.Bridge, Uplink: s.conf.Uplink}, nil, bin)
	switch {
	case err != nil:
		s.log.Error("uninstall: failed to clean the node after the last attachment", "error", err)
	case done:
		s.log.Info("uninstall: last attachment gone, node cleaned", "conflists", res.Conflists, "binary", res.Binary, "tables", res.Tables,
			"bridge", res.Bridge, "stateDir", res.StateDir, "kept", res.Kept)
	case len(res.Kept) > 0:
		s.log.Info("uninstall marked: node resources kept", "kept", res.Kept)
	}
}

// passThrough is ADD on a node podwire is being uninstalled from (the
// marker): the pod is not wired (no check, no forwarding, no VLAN), and the
// primary's result is returned as it came. Its record holds nothing to
// undo; it only keeps the entry and the binary on the node until the pod's
// DEL, which a runtime that tears pods down with their cached config
// (CRI-O) still runs through podwire.
func (s *session) passThrough() error {
	rec := &state.Record{Version: state.RecordVersion, ContainerID: s.args.ContainerID, IfName: s.args.IfName,
		Netns: s.args.Netns, Network: s.conf.Name, Created: time.Now().UTC(), Complete: true,
		PodNamespace: s.pod.Namespace, PodName: s.pod.Name, PodUID: s.pod.UID}
	unlock, err := s.lock.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	// Under the lock: a new agent may have removed the marker (a
	// re-install), or the last DEL the node's podwire.
	if !install.Uninstalled(s.conf.StateDir) {
		return types.NewError(types.ErrTryAgainLater, "podwire's uninstall marker went away during the ADD (a re-install, or the last DEL removed podwire from the node)", "")
	}
	if err := s.store.Put(rec); err != nil {
		return err
	}
	s.log.Warn("ADD: podwire is being uninstalled from this node: the pod is not wired")
	return types.PrintResult(s.conf.Result, s.conf.CNIVersion)
}
