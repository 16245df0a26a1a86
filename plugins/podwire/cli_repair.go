package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/podwire/podwire/pkg/noderepair"
)

// cliRepair implements
//
//	podwire repair [--conflist FILE | --conf-dir DIR] [--config JSON|@FILE]
//	               [--unknown] [--drop-unknown IF,...]
//
// It runs noderepair.Run, the node agent's own repair (ADD's verify and
// apply of the node tables, the element-level verify of every record, the
// unknown interfaces and the VLAN wiring), without a pod, in the netns
// it is started in. It prints JSON and exits 0 when the tables are current
// (repaired or not), 1 otherwise.
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
	opts := noderepair.Options{Unknown: *unknown || *dropUnknown != "", Drop: map[string]bool{}}
	for _, n := range strings.Split(*dropUnknown, ",") {
		if n = strings.TrimSpace(n); n != "" {
			opts.Drop[n] = true
		}
	}
	res, err := noderepair.Run(conf, from, opts)
	if err != nil {
		fmt.Fprintf(stderr, "podwire repair: %v\n", err)
		return 1
	}
	if len(res.VLANRepaired) > 0 {
		newLogger(conf).With("verb", "repair").Info("VLAN wiring repaired", "attachments", res.VLANRepaired)
	}
	if res.Repaired {
		newLogger(conf).With("verb", "repair").Info("node tables repaired",
			"drift", res.Drift, "rebuilt", res.Rebuilt, "deleted", res.Deleted, "elementsReadded", res.ElementsReadded)
	}
	return printJSON(stdout, stderr, res)
}
