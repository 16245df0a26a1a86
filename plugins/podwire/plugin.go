package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/logfile"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/ruleset"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/plugins/podwire/internal/oneproc"
)

// plugin is podwire run by a runtime, with its backends; main wires the
// real ones, tests fakes.
type plugin struct {
	// dialNFT opens the nftables connection, once per invocation and only
	// when the tables are touched.
	dialNFT func() (nft.Conn, error)
	node    nodeReader
	routes  routeTable
	vlan    vlanWiring
	neigh   announcer
	sysctls sysctls
}

// linuxPlugin is the plugin over the kernel of the current netns.
func linuxPlugin() *plugin {
	return &plugin{
		dialNFT: func() (nft.Conn, error) { return nft.Dial() },
		node:    linuxLinks{},
		routes:  linuxLinks{},
		vlan:    linuxLinks{},
		neigh:   linuxLinks{},
		sysctls: linuxSysctls{},
	}
}

// session is what one CNI invocation shares among the attachments it works
// on (one, or every removed one for GC): the config, the logger, the state
// store, the node lock (held re-entrantly) and the nftables connection.
type session struct {
	*plugin
	args  *skel.CmdArgs
	conf  *config.NetConf
	pod   podmeta.Identity
	log   *slog.Logger
	store *state.Store
	lock  *state.NodeLock
	nft   nft.Conn
	// intact is what the invocation knows of its tables' generation (set
	// by ensureTables, or by teardown from the file), nil before.
	intact *nft.Intact
}

// invocation is one attachment worked on within a session: its record and,
// on ADD, the result being built.
type invocation struct {
	*session
	rec *state.Record
	// res is the result ADD returns (prevResult plus what add appends);
	// prevResult on CHECK; nil on DEL and GC.
	res *current.Result
	// log names the attachment.
	log *slog.Logger
	// env is the node snapshot ADD planned from; zero elsewhere.
	env nodeEnv
}

// attach returns an invocation for rec in s.
func (s *session) attach(rec *state.Record) *invocation {
	return &invocation{session: s, rec: rec, log: s.log}
}

// newSession parses the config and opens the logger and the state store.
// It changes nothing on the node.
func (p *plugin) newSession(args *skel.CmdArgs, verb string) (*session, error) {
	conf, err := config.Parse(args.StdinData)
	if err != nil {
		return nil, err
	}
	s := &session{plugin: p, args: args, conf: conf, store: state.New(conf.StateDir)}
	s.lock = s.store.NodeLock()
	s.log = newLogger(conf).With("verb", verb, "containerID", args.ContainerID, "ifname", args.IfName)
	if verb != "STATUS" { // STATUS logs warnings once per change (status.go)
		for _, w := range conf.Warnings {
			s.log.Warn(w)
		}
	}
	if s.pod, err = podmeta.IdentityFromArgs(args.Args); err != nil {
		if verb == "ADD" {
			return nil, err
		}
		// The identity only names the pod in the log; DEL, CHECK and GC
		// work from the record, so a malformed CNI_ARGS must not stop them.
		s.log.Warn("ignoring malformed CNI_ARGS", "error", err)
	}
	if s.pod.Name != "" {
		s.log = s.log.With("pod", s.pod.String())
	}
	return s, nil
}

// conn opens the nftables connection lazily.
func (s *session) conn() (nft.Conn, error) {
	if s.nft == nil {
		c, err := s.dialNFT()
		if err != nil {
			return nil, types.NewError(types.ErrInternal, "failed to open nftables netlink socket", err.Error())
		}
		s.nft = c
	}
	return s.nft, nil
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

// ensureTables lays down or repairs the tables want (docs/configuration.md,
// "Node tables"): every ADD verifies them by content, reading only
// podwire's own objects, and rebuilds what differs under the node lock.
//
// When the ruleset generation is the one at which the tables were last
// found or kept intact (nft.Intact), nothing can have changed them and the
// verify is skipped; any commit by another owner moves the generation.
func (s *session) ensureTables(want []*nft.Table) error {
	c, err := s.conn()
	if err != nil {
		return err
	}
	s.closeIntact() // a repeated ADD's teardown may have opened one
	s.intact = nft.OpenIntact(filepath.Join(s.conf.StateDir, intactFile), want)
	c = s.intact.Conn(c)
	s.nft = c
	if s.intact.Known() {
		return nil
	}
	rebuild := func() (func(), error) {
		// Ensure takes the lock only to rebuild, which reads every
		// record of the node with one worker per P.
		oneproc.Widen()
		return s.lock.Lock()
	}
	rep, err := ruleset.Ensure(c, want, s.store, s.conf, rebuild, func(err error) {
		// Corrupt records are skipped: one bad file must not stop the node.
		s.log.Error("skipping unreadable state records", "error", err)
	})
	if err != nil {
		s.intact.Spoil()
		return err
	}
	if rep.Changed() {
		s.log.Info("node tables laid down or repaired", "drift", rep.Drift, "rebuilt", rep.Rebuilt, "deleted", rep.Deleted)
	} else {
		s.intact.Verified()
	}
	return nil
}

// intactFile, in stateDir, holds the generation at which the tables were
// last known intact (nft.Intact).
const intactFile = "nft-intact"

// carryIntact lets the element batches of a verb that does not verify
// (DEL, GC, ADD's rollback before ensureTables) carry the fact of the
// file forward (nft.Intact), on the connection c.
func (s *session) carryIntact(c nft.Conn) nft.Conn {
	if s.intact == nil {
		s.intact = nft.OpenIntact(filepath.Join(s.conf.StateDir, intactFile), nil)
		s.nft = s.intact.Conn(c)
	}
	return s.nft
}

// closeIntact releases the generation socket of nft.Intact; every verb
// that may flush calls it at its end.
func (s *session) closeIntact() {
	if s.intact != nil {
		s.intact.Close()
	}
}
