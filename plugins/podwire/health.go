package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/podwire/podwire/pkg/atomicfile"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/state"
)

// health is what podwire says about the node, for STATUS and for
// `podwire status` alike.
//
// A runtime turns a STATUS error into NetworkReady=false, which marks the
// whole node NotReady: so only what stops every ADD is Unavailable
// (nftables unusable, stateDir unwritable). Everything that fails some ADDs
// or weakens a feature is a Warning: a missing or unusable VLAN uplink fails
// only the ADD of a pod that needs a VLAN (naming the uplink), an rp_filter
// that voids forwarding pods' relaxation, an egress IP not on the node.
type health struct {
	// Unavailable are the reasons no ADD can work (STATUS error 50).
	Unavailable []string
	// Warnings never fail STATUS.
	Warnings []string
}

// readHealth reads the node's health for conf through p's backends. env is
// the node snapshot the tables are planned from (read once by the caller);
// nftOK reports whether nftables answers (nil when it does), or is nil when
// the config wants no node tables.
func (p *plugin) readHealth(conf *config.NetConf, env nodetables.Env, nftOK func() error) health {
	var h health
	if nftOK != nil {
		if err := nftOK(); err != nil {
			h.Unavailable = append(h.Unavailable, fmt.Sprintf("nftables unusable: %v", err))
		}
	}
	if err := stateDirWritable(conf.StateDir); err != nil {
		h.Unavailable = append(h.Unavailable, fmt.Sprintf("stateDir %q unwritable: %v", conf.StateDir, err))
	}
	h.Warnings = append(h.Warnings, conf.Warnings...)
	if w := p.uplinkWarning(conf); w != "" {
		h.Warnings = append(h.Warnings, w)
	}
	if len(conf.Forwarding.Namespaces) > 0 {
		if w := p.sysctls.rpFilterWarning(); w != "" {
			h.Warnings = append(h.Warnings, w)
		}
	}
	h.Warnings = append(h.Warnings, p.node.tableWarnings(env)...)
	h.Warnings = append(h.Warnings, uncheckedWarnings(conf.StateDir)...)
	if typ, err := os.ReadFile(filepath.Join(conf.StateDir, config.PrimaryTypeName)); err == nil {
		if w := primaryWarning(string(typ)); w != "" {
			h.Warnings = append(h.Warnings, w)
		}
	}
	return h
}

// stateDirWritable creates and removes a file in dir (creating dir first,
// as ADD would).
func stateDirWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".status-probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// statusDigestFile holds the warnings STATUS last logged, so that STATUS
// (polled by a kubelet every few seconds) logs only when they change.
const statusDigestFile = "status-warnings"

// warningsChanged reports whether ws differ from what the last STATUS
// logged, and records ws when they do (no record yet counts as no
// warnings). When the record cannot be read or written the answer is true:
// better a repeated line than a lost warning.
func warningsChanged(stateDir string, ws []string) bool {
	path := filepath.Join(stateDir, statusDigestFile)
	now := strings.Join(ws, "\n")
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return true
	}
	// No record yet is the same as "no warnings logged".
	if string(old) == now {
		return false
	}
	_ = atomicfile.WriteFile(path, []byte(now), state.FileMode)
	return true
}

// uncheckedWarnings name the pods whose sources podwire cannot check (the
// primary gives them no host interface, or an Open vSwitch port), from the
// store's index: one read, no listing of the records.
func uncheckedWarnings(stateDir string) []string {
	lines, err := state.New(stateDir).Unchecked()
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, l := range lines {
		if _, pod, ok := strings.Cut(l, "\t"); ok {
			out = append(out, "source addresses not checked: "+pod)
		}
	}
	return out
}
