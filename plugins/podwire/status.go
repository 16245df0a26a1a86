package main

import (
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/ruleset"
)

// cmdStatus answers whether ADD can work (CNI 1.1 STATUS): nil while an
// ordinary pod's ADD can, error 50 (plugin not available) only when none can
// (see health). Warnings are logged once per change and nothing is logged
// when nothing changed: kubelets poll STATUS every few seconds.
func (p *plugin) cmdStatus(args *skel.CmdArgs) error {
	s, err := p.newSession(args, "STATUS")
	if err != nil {
		return err
	}
	env := p.node.tablesEnv(s.conf)
	h := p.readHealth(s.conf, env, s.nftOK(env))
	if len(h.Unavailable) > 0 {
		// Logged each time: the node is NotReady until this is fixed.
		s.log.Error("STATUS: plugin not available", "problems", h.Unavailable)
		return types.NewError(types.ErrPluginNotAvailable, strings.Join(h.Unavailable, "; "), "")
	}
	if warningsChanged(s.conf.StateDir, h.Warnings) {
		if len(h.Warnings) == 0 {
			s.log.Info("STATUS: warnings cleared")
		}
		for _, w := range h.Warnings {
			s.log.Warn("STATUS: " + w)
		}
	}
	return nil
}

// nftOK returns the nftables probe for readHealth: nil when the config
// wants no node tables on a node described by env (ADD then never touches
// nftables).
func (s *session) nftOK(env nodetables.Env) func() error {
	if len(ruleset.Tables(s.conf, env)) == 0 {
		return nil
	}
	return func() error {
		c, err := s.conn()
		if err == nil {
			_, err = c.ListTables()
		}
		return err
	}
}
