package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/podwire/podwire/pkg/atomicfile"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/install"
)

// How the agent keeps podwire in the node's chain.
const (
	// ModeEdit appends podwire to the primary's own conflist (pkg/install):
	// for primaries whose installer writes the file once and leaves it
	// (flannel's install-cni init container, Calico's install-cni, ptp,
	// bridge). The agent restores the entry after each rewrite; the primary
	// does not watch its file, so there is no fight.
	ModeEdit = "edit"
	// ModeDerive writes a conflist of the agent's own (DerivedName), the
	// primary's conflist plus podwire, sorting before the primary's: for
	// primaries whose agent watches its own file and rewrites it on any
	// change (Cilium's CNI config manager, cilium/cilium#26773), which an
	// edit would fight. Cilium's chaining mode works the same way.
	ModeDerive = "derive"
	// ModeAuto chooses per primary with ModeFor.
	ModeAuto = "auto"
)

// DerivedName is the agent's own conflist in ModeDerive: "00-" sorts before
// every primary's file (05-cilium.conflist, 10-calico.conflist, ...), and a
// runtime uses the first conflist of the conf dir.
const DerivedName = "00-podwire.conflist"

// ModeFor is the per-primary choice of ModeAuto, from the type of the
// primary's first plugin.
func ModeFor(primaryType string) string {
	switch primaryType {
	case "cilium-cni":
		return ModeDerive
	default:
		return ModeEdit
	}
}

// Chain keeps the plugin binary in the CNI bin dir and podwire's entry in
// the chain of the node's network (the first conflist of ConfDir, the one
// a runtime uses).
type Chain struct {
	ConfDir string
	BinDir  string
	// Plugin is the podwire binary to install (in the agent's image).
	Plugin string
	// Entry is podwire's entry as JSON; nil keeps an existing entry or adds
	// install.DefaultEntry.
	Entry []byte
	// Mode is ModeAuto, ModeEdit or ModeDerive.
	Mode string
	// HostConfDir is where the node has ConfDir, when the agent sees it
	// at another path (a hostPath mount, /host/etc/cni/net.d): the
	// uninstall marker names the node's paths, for the plugin's last DEL.
	// "" means ConfDir.
	HostConfDir string
	// NetworkAttachment reads a NetworkAttachmentDefinition's spec.config
	// ("" when empty; found false when there is no such object, or no
	// such resource) for a Multus clusterNetwork that names one (InUse;
	// NetworkAttachments). nil: the agent reads none, and such a name
	// resolves to the conf dir's configuration of that name only.
	NetworkAttachment func(ctx context.Context, namespace, name string) (config string, found bool, err error)
	// installed is what Plugin and the installed binary were when Sync
	// last found them equal (Sync only).
	installed [2]fileStamp
}

// binaryCurrent reports whether the installed binary is the agent's own
// build, as the last Sync found it (true when the agent installs none).
func (c *Chain) binaryCurrent() bool {
	return c.BinDir == "" || c.Plugin == "" || c.installed != [2]fileStamp{}
}

// fileStamp identifies a file's content without reading it: the inode, the
// size and the modification and change times. Any write changes the change
// time, which no one can set back, and a replacement is another inode.
type fileStamp struct {
	dev, ino, size uint64
	mtime, ctime   unix.Timespec
}

// stamp is the fileStamp of path (the zero stamp when it cannot be read).
func stamp(path string) fileStamp {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return fileStamp{}
	}
	return fileStamp{dev: st.Dev, ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim, ctime: st.Ctim}
}

// SyncResult says what Sync found and did.
type SyncResult struct {
	// Primary is the primary's conflist, PrimaryType its first plugin's
	// type ("flannel", "cilium-cni"); Conflist the file holding podwire.
	Primary     string
	PrimaryType string
	Conflist    string
	Mode        string
	// BinaryChanged and ConflistChanged are true when a file was written.
	BinaryChanged   bool
	ConflistChanged bool
}

// Sync installs the binary (first: a conflist naming podwire must never
// precede it), then puts podwire's entry in the chain. It is idempotent and
// writes nothing when both are in place.
func (c *Chain) Sync() (*SyncResult, error) {
	res := &SyncResult{}
	var err error
	if c.BinDir != "" && c.Plugin != "" {
		// A byte-wise compare of two binaries of a few MiB at every pass
		// would be most of an idle agent's CPU: it runs only when either
		// file changed.
		dst := filepath.Join(c.BinDir, install.PluginType)
		now := [2]fileStamp{stamp(c.Plugin), stamp(dst)}
		if now != c.installed || now[0] == (fileStamp{}) || now[1] == (fileStamp{}) {
			c.installed = [2]fileStamp{}
			if _, res.BinaryChanged, err = install.InstallBinary(c.Plugin, c.BinDir); err != nil {
				return res, err
			}
			c.installed = [2]fileStamp{stamp(c.Plugin), stamp(dst)}
		}
	}
	primary, typ, err := c.primary()
	if err != nil {
		return res, err
	}
	res.Primary, res.PrimaryType, res.Mode = primary, typ, c.Mode
	if res.Mode == "" || res.Mode == ModeAuto {
		res.Mode = ModeFor(typ)
		if filepath.Ext(primary) != ".conflist" {
			// A single-plugin .conf cannot hold a chain; converting it
			// would rename the primary's file under its installer.
			res.Mode = ModeDerive
		}
	}
	derived := filepath.Join(c.ConfDir, DerivedName)
	switch res.Mode {
	case ModeDerive:
		res.Conflist = derived
		res.ConflistChanged, err = install.Derive(primary, derived, c.Entry)
		return res, err
	case ModeEdit:
		r, err := install.Install(install.Options{Conflist: primary, Config: c.Entry})
		if err != nil {
			return res, err
		}
		res.Conflist, res.ConflistChanged = r.Conflist, r.ConflistChanged
		// A derived conflist of an earlier mode would shadow the primary's.
		if err := os.Remove(derived); err == nil {
			res.ConflistChanged = true
		}
		return res, nil
	default:
		return res, fmt.Errorf("unknown chain mode %q (want %s, %s or %s)", res.Mode, ModeAuto, ModeEdit, ModeDerive)
	}
}

// primary returns the first conflist of the conf dir other than ours and
// Multus's, in libcni's order, and the type of its first plugin. Multus's
// generated configuration is skipped: its delegate, the primary's own
// conflist, is where podwire goes, and Multus follows that file (InUse
// says when it does).
func (c *Chain) primary() (path, typ string, err error) {
	files, err := install.ConfFiles(c.ConfDir)
	if err != nil {
		return "", "", fmt.Errorf("failed to list CNI conf dir %q: %w", c.ConfDir, err)
	}
	for _, f := range files {
		if filepath.Base(f) == DerivedName {
			continue
		}
		// A file that vanished between the listing and the read, is
		// being written, or is not ours to judge: libcni skips it too.
		conf, ok := readConfHead(f)
		if !ok || conf.isMultus() {
			continue
		}
		if len(conf.Plugins) > 0 {
			return f, conf.Plugins[0].Type, nil
		}
		if conf.Type != "" {
			return f, conf.Type, nil
		}
	}
	return "", "", fmt.Errorf("no primary CNI conflist in %q yet", c.ConfDir)
}

// files are the files that hold podwire in the chain, in the agent's view:
// the primary's conflist and conflist (the file Sync last wrote, when it
// differs; "" for none), and the derived conflist (ModeDerive).
func (c *Chain) files(conflist string) (conflists []string, derived string) {
	derived = filepath.Join(c.ConfDir, DerivedName)
	if primary, _, err := c.primary(); err == nil {
		conflists = append(conflists, primary)
	}
	if conflist != "" && conflist != derived && !slices.Contains(conflists, conflist) {
		conflists = append(conflists, conflist)
	}
	return conflists, derived
}

// nodePath is the node's path of p, a path under ConfDir: the plugin, run
// by the runtime, sees the conf dir at HostConfDir ("" = ConfDir: the
// agent runs on the node itself).
func (c *Chain) nodePath(p string) string {
	if c.HostConfDir == "" {
		return p
	}
	rel, err := filepath.Rel(c.ConfDir, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return filepath.Join(c.HostConfDir, rel)
}

// reconcileChain clears an uninstall marker written while this agent runs,
// installs the binary and puts podwire's entry back in the chain; a
// restore after the first pass is logged and recorded on the Node. A
// change of the conflist that holds podwire (written, or another file)
// may change what the node tables and the gates are: they are triggered.
//
// Triggers: a write in the CNI conf dir, settled 200 ms (a primary's
// installer writes a temporary file, then renames it); Timing.Interval
// as a backstop, since whether the runtime reads that conflist (InUse)
// also depends on files outside the conf dir.
func (a *Agent) reconcileChain(context.Context) error {
	// A marker written while this agent runs (an older agent's stop,
	// decided as an uninstall, racing a reinstall): this agent keeps
	// podwire on the node.
	var errs []error
	if err := a.clearUninstalled(); err != nil {
		errs = append(errs, fmt.Errorf("uninstall marker: %w", err))
	}
	res, err := a.cfg.Chain.Sync()
	if err != nil {
		a.setOutOfChain(err)
		return errors.Join(append(errs, err)...)
	}
	inUse := a.cfg.Chain.InUse(res.Conflist)
	a.setOutOfChain(inUse)
	if inUse != nil {
		errs = append(errs, fmt.Errorf("podwire out of the runtime's chain: %w", inUse))
	}
	if err := a.writePrimaryType(res.PrimaryType); err != nil {
		errs = append(errs, fmt.Errorf("primary type: %w", err))
	}
	a.st.mu.Lock()
	first := a.st.status.Conflist == ""
	moved := a.st.status.Conflist != res.Conflist
	a.st.status.Conflist, a.st.status.Mode = res.Conflist, res.Mode
	if res.ConflistChanged && !first {
		a.st.status.Restores++
		a.m.restores.WithLabelValues(res.Mode).Inc()
	}
	a.st.mu.Unlock()
	if res.BinaryChanged {
		a.log.Info("plugin binary installed", "binDir", a.cfg.Chain.BinDir)
	}
	if res.ConflistChanged || moved {
		a.repairDue(0)
		a.run.trigger(recGates, 0)
	}
	switch {
	case !res.ConflistChanged:
	case first:
		a.log.Info("podwire put in the chain", "conflist", res.Conflist, "primary", res.Primary, "mode", res.Mode)
	default:
		msg := fmt.Sprintf("podwire's entry was missing from %s (primary %s rewritten): restored (mode %s)", res.Conflist, res.Primary, res.Mode)
		a.log.Warn(msg)
		a.ev.onNode(a.api.node.UID(), corev1.EventTypeNormal, ReasonChainRestored, msg)
	}
	return errors.Join(errs...)
}

// setOutOfChain records why podwire is out of the runtime's chain (nil:
// it is in it), which readiness and the startup taint follow.
func (a *Agent) setOutOfChain(err error) {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	a.st.outOfChain = ""
	if err != nil {
		a.st.outOfChain = err.Error()
	}
}

// conflist is the file holding podwire's entry ("" before the chain's
// first good pass).
func (a *Agent) conflist() string {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	return a.st.status.Conflist
}

// writePrimaryType writes the chain's primary plugin type into stateDir
// (config.PrimaryTypeName) when it differs from what is there, for the
// plugin's STATUS (a Cilium primary's pods bypass podwire's check).
func (a *Agent) writePrimaryType(typ string) error {
	path := filepath.Join(a.cfg.StateDir, config.PrimaryTypeName)
	if old, err := os.ReadFile(path); err == nil && string(old) == typ {
		return nil
	}
	return atomicfile.WriteFile(path, []byte(typ), 0o600)
}
