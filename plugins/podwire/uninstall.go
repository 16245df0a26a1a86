package main

import (
	"os"
	"path/filepath"

	"github.com/podwire/podwire/pkg/install"
)

// finishUninstall runs after a DEL or GC that left the node's attachments
// removed: when the node agent marked an uninstall (install.UninstalledName
// in stateDir) and no attachment is recorded any more, it removes podwire's
// node tables, the bridge if podwire made it, stateDir and this very
// binary, under the node lock (install.FinishUninstall). The runtime's
// cached config still names podwire for the pods wired before the
// uninstall, so the binary stays until the last of them is deleted. Its
// failure is logged and does not fail the verb: the attachment itself is
// gone.
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
	res, done, err := install.FinishUninstall(install.NodeOptions{StateDir: s.conf.StateDir, Bridge: s.conf.Bridge, Uplink: s.conf.Uplink}, bin)
	switch {
	case err != nil:
		s.log.Error("uninstall: failed to clean the node after the last attachment", "error", err)
	case done:
		s.log.Info("uninstall: last attachment gone, node cleaned", "binary", res.Binary, "tables", res.Tables,
			"bridge", res.Bridge, "stateDir", res.StateDir, "kept", res.Kept)
	case len(res.Kept) > 0:
		s.log.Info("uninstall marked: node resources kept", "kept", res.Kept)
	}
}
