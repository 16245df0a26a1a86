package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/logfile"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/state"
)

// step is one concern of podwire (source check, forwarding, VLAN, ...).
//
// ADD runs plan for every step (no change to the node yet: fill the record
// with what add will create), writes the record, ensures the node tables,
// runs add for every step in order, then adds every step's set elements in one
// batch. When anything fails, del runs for the steps that ran, in reverse, from
// the record. DEL runs del for every step in reverse from the record alone:
// the pod's netns and prevResult may be gone, and "not found" is success.
type step interface {
	name() string
	plan(a *attachment) error
	add(a *attachment) error
	del(a *attachment) error
	check(a *attachment) error
}

// tableOwner is a step that owns node tables: their description for the
// current config, and the set elements of one attachment.
type tableOwner interface {
	tables(conf *config.NetConf) []*nft.Table
	elements(conf *config.NetConf, rec *state.Record) nft.Elements
}

// steps are podwire's concerns in ADD order.
var steps = []step{
	primaryStep{},
	vlanStep{},
	forwardingStep{},
	sourceCheckStep{},
	nodeTablesStep{},
	neighStep{},
}

// attachment is one CNI invocation's working state.
type attachment struct {
	args *skel.CmdArgs
	conf *config.NetConf
	pod  podmeta.Identity
	ann  *podmeta.Annotations // nil on DEL and GC
	// source is where the annotations came from (podmeta.Source*).
	source string
	rec    *state.Record
	res    *current.Result // result to return (ADD), prevResult otherwise
	log    *slog.Logger
	store  *state.Store
	nft    nft.Conn

	// want caches tables(); nil until first used.
	want []*nft.Table

	lockDepth int
	unlock    func()
}

// nodeLock takes the node lock unless this invocation holds it already; the
// returned func releases one level.
func (a *attachment) nodeLock() (func(), error) {
	if a.lockDepth == 0 {
		unlock, err := a.store.Lock()
		if err != nil {
			return nil, err
		}
		a.unlock = unlock
	}
	a.lockDepth++
	return func() {
		a.lockDepth--
		if a.lockDepth == 0 {
			a.unlock()
		}
	}, nil
}

// newAttachment parses the config and opens the logger, the state store and
// the nftables connection. It changes nothing on the node.
func newAttachment(args *skel.CmdArgs, verb string) (*attachment, error) {
	conf, err := config.Parse(args.StdinData)
	if err != nil {
		return nil, err
	}
	a := &attachment{args: args, conf: conf, store: state.New(conf.StateDir)}
	a.log = newLogger(conf).With("verb", verb, "containerID", args.ContainerID, "ifname", args.IfName)
	if verb != "STATUS" { // STATUS logs warnings once per change (status.go)
		for _, w := range conf.Warnings {
			a.log.Warn(w)
		}
	}
	if a.pod, err = podmeta.IdentityFromArgs(args.Args); err != nil {
		if verb == "ADD" {
			return nil, err
		}
		// The identity only names the pod in the log; DEL, CHECK and GC
		// work from the record, so a malformed CNI_ARGS must not stop them.
		a.log.Warn("ignoring malformed CNI_ARGS", "error", err)
	}
	if a.pod.Name != "" {
		a.log = a.log.With("pod", a.pod.String())
	}
	return a, nil
}

// conn opens the nftables netlink connection of the current netns lazily.
func (a *attachment) conn() (nft.Conn, error) {
	if a.nft == nil {
		c, err := nftables.New(nft.BatchBuffer())
		if err != nil {
			return nil, types.NewError(types.ErrInternal, "failed to open nftables netlink socket", err.Error())
		}
		a.nft = c
	}
	return a.nft, nil
}

// newLogger writes to the config's logFile, rotated at its size limit
// (pkg/logfile: safe for the many plugin processes a runtime runs at once),
// or to stderr when there is none. Never stdout: it carries the CNI result.
func newLogger(conf *config.NetConf) *slog.Logger {
	var w io.Writer = os.Stderr
	if conf.LogFile != "" {
		w = logfile.Open(conf.LogFile, logfile.Options{
			MaxSizeBytes: int64(conf.LogFileMaxSize) << 20,
			MaxBackups:   conf.LogFileMaxBackups,
			MaxAgeDays:   conf.LogFileMaxAge,
		})
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// wantTables are the node tables every step wants for the config.
func wantTables(conf *config.NetConf) []*nft.Table {
	var out []*nft.Table
	for _, s := range steps {
		if o, ok := s.(tableOwner); ok {
			out = append(out, o.tables(conf)...)
		}
	}
	return out
}

// recordElements are the set elements of one attachment, across steps.
func recordElements(conf *config.NetConf, rec *state.Record) nft.Elements {
	e := nft.Elements{}
	for _, s := range steps {
		if o, ok := s.(tableOwner); ok {
			e.Merge(o.elements(conf, rec))
		}
	}
	return e
}

// allElements are the set elements of every recorded attachment.
func allElements(conf *config.NetConf, store *state.Store, log *slog.Logger) (nft.Elements, error) {
	recs, err := store.List()
	if err != nil {
		// Corrupt records are skipped: one bad file must not stop the node.
		log.Error("skipping unreadable state records", "error", err)
	}
	e := nft.Elements{}
	for _, r := range recs {
		e.Merge(recordElements(conf, r))
	}
	return e, nil
}

// tables are the node tables for this invocation, described once: their
// description reads the node (default-route uplinks, egress IPs), so ADD
// must not pay for it at every use.
func (a *attachment) tables() []*nft.Table {
	if a.want == nil {
		a.want = wantTables(a.conf)
	}
	return a.want
}

// ensureTables lays down or repairs the node tables (DESIGN.md, "First
// invocation"): one chain dump when they are current.
func (a *attachment) ensureTables() error {
	want := a.tables()
	if len(want) == 0 {
		return nil
	}
	c, err := a.conn()
	if err != nil {
		return err
	}
	changed, err := nft.Ensure(c, want, a.nodeLock, func() (nft.Elements, error) {
		return allElements(a.conf, a.store, a.log)
	})
	if err != nil {
		return err
	}
	if changed {
		a.log.Info("node tables laid down or repaired")
	}
	return nil
}
