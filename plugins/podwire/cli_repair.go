package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/ruleset"
	"github.com/podwire/podwire/pkg/state"
)

// cliRepair implements
//
//	podwire repair [--conflist FILE | --conf-dir DIR] [--config JSON|@FILE]
//	               [--unknown] [--drop-unknown IF,...]
//
// It runs ruleset.Repair, ADD's verify and apply of the node tables plus the
// element-level verify of every record, and the VLAN wiring's repair
// (repairVLANs), without a pod: the node agent calls it every few seconds, so drift is repaired
// without waiting for the next ADD. It prints JSON and exits 0 when the
// tables are current (repaired or not), 1 otherwise.
func cliRepair(args []string, stdout, stderr io.Writer) int {
	fs := cliFlags("podwire repair [--conflist FILE | --conf-dir DIR] [--config JSON|@FILE] [--unknown] [--drop-unknown IF,...]", stderr)
	src := entryFlags(fs)
	unknown := fs.Bool("unknown", false, "also list the node's pod interfaces without a podwire record")
	dropUnknown := fs.String("drop-unknown", "", "comma-separated unknown interfaces whose sources to check as a pod's (implies --unknown)")
	if !parseFlags(fs, args) {
		return 2
	}
	entry, from, warn, err := findEntry(src.confDir, src.conflist, src.config)
	if err == nil && warn != "" {
		err = fmt.Errorf("%s", warn)
	}
	if err != nil {
		fmt.Fprintf(stderr, "podwire repair: %v\n", err)
		return 1
	}
	conf, err := parseEntry(entry)
	if err != nil {
		fmt.Fprintf(stderr, "podwire repair: %s: %v\n", from, err)
		return 1
	}
	res := cliapi.RepairResult{Conflist: from, Tables: []string{}}
	p := linuxPlugin()
	env := p.node.tablesEnv(conf)
	want := ruleset.Tables(conf, env)
	for _, t := range want {
		res.Tables = append(res.Tables, t.ID().String())
	}
	c, err := p.dialNFT()
	if err != nil {
		fmt.Fprintf(stderr, "podwire repair: nftables unusable: %v\n", err)
		return 1
	}
	// ruleset.Repair: the tables by content (rebuilt under the node lock
	// when they drifted, obsolete ones deleted), then every record's
	// elements, missing ones re-added.
	rep, missing, err := ruleset.Repair(c, conf, env, state.New(conf.StateDir))
	if err != nil {
		fmt.Fprintf(stderr, "podwire repair: %v\n", err)
		return 1
	}
	res.Drift = rep.Drift
	for _, id := range rep.Rebuilt {
		res.Rebuilt = append(res.Rebuilt, id.String())
	}
	for _, id := range rep.Deleted {
		res.Deleted = append(res.Deleted, id.String())
	}
	for id, n := range missing {
		if res.ElementsReadded == nil {
			res.ElementsReadded = map[string]int{}
		}
		res.ElementsReadded[id.String()] = n
		res.MissingElements += n
	}
	if *unknown || *dropUnknown != "" {
		drop := map[string]bool{}
		for _, n := range strings.Split(*dropUnknown, ",") {
			drop[strings.TrimSpace(n)] = n != ""
		}
		if res.Unknown, err = unknownInterfaces(c, conf, env, from, state.New(conf.StateDir), want, drop); err != nil {
			fmt.Fprintf(stderr, "podwire repair: unknown interfaces: %v\n", err)
			return 1
		}
	}
	res.Errors = nodetables.Errors(nodetables.EnvWarnings(env))
	if res.VLANRepaired, res.VLANLinks, err = repairVLANs(state.New(conf.StateDir)); err != nil {
		res.VLANErrors = append(res.VLANErrors, err.Error())
	}
	if len(res.VLANRepaired) > 0 {
		newLogger(conf).With("verb", "repair").Info("VLAN wiring repaired", "attachments", res.VLANRepaired)
	}
	res.Repaired = rep.Changed() || res.MissingElements > 0
	if res.Repaired {
		newLogger(conf).With("verb", "repair").Info("node tables repaired",
			"drift", rep.Drift, "rebuilt", res.Rebuilt, "deleted", res.Deleted, "elementsReadded", res.ElementsReadded)
	}
	return printJSON(stdout, stderr, res)
}
