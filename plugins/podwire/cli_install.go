package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/install"
)

// cliInstall implements
//
//	podwire install --bin-dir DIR --conflist FILE [--config JSON|@FILE] [--convert] [--json]
func cliInstall(args []string, stdout, stderr io.Writer) int {
	fs := cliFlags("podwire install --bin-dir DIR --conflist FILE [--config JSON|@FILE] [--convert] [--json]", stderr)
	binDir := fs.String("bin-dir", "", "CNI bin dir to copy the binary into (e.g. /opt/cni/bin); empty: leave binaries alone")
	conflist := fs.String("conflist", "", "the network's conflist to chain podwire in (e.g. /etc/cni/net.d/10-flannel.conflist)")
	cfg := fs.String("config", "", "podwire entry as JSON, or @FILE; default: keep the existing entry or add a minimal one")
	convert := fs.Bool("convert", false, "convert a single-plugin .conf into a conflist (the .conf is kept as FILE.bak)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if !parseFlags(fs, args) {
		return 2
	}
	if *conflist == "" {
		fs.Usage()
		return 2
	}
	o := install.Options{BinDir: *binDir, Conflist: *conflist, Convert: *convert}
	if *cfg != "" {
		entry, err := readEntry(*cfg)
		if err != nil {
			fmt.Fprintf(stderr, "podwire install: %v\n", err)
			return 1
		}
		o.Config = entry
	}
	res, err := install.Install(o)
	if err != nil {
		fmt.Fprintf(stderr, "podwire install: %v\n", err)
		return 1
	}
	if *asJSON {
		return printJSON(stdout, stderr, res)
	}
	if res.Binary != "" {
		fmt.Fprintf(stdout, "binary %s: %s\n", res.Binary, changedWord(res.BinaryChanged, "installed"))
	}
	fmt.Fprintf(stdout, "conflist %s: %s\n", res.Conflist, changedWord(res.ConflistChanged, "podwire entry written"+backupNote(res.Backup)))
	return 0
}

// cliUninstall implements
//
//	podwire uninstall [--bin-dir DIR] [--conflist FILE] [--config JSON|@FILE] [--keep-node] [--force] [--json]
//
// The conflist goes first (no new pod is wired), then the binary, then the
// node's tables, bridge and state, found from the conflist's podwire entry
// (or --config, or the defaults).
func cliUninstall(args []string, stdout, stderr io.Writer) int {
	fs := cliFlags("podwire uninstall [--bin-dir DIR] [--conflist FILE] [--config JSON|@FILE] [--keep-node] [--force] [--json]", stderr)
	binDir := fs.String("bin-dir", "", "CNI bin dir to remove the binary from; empty: keep it")
	conflist := fs.String("conflist", "", "conflist to take the podwire entry out of")
	cfg := fs.String("config", "", "podwire config as JSON or @FILE, when the conflist no longer holds the entry (for stateDir, bridge, uplink)")
	keepNode := fs.Bool("keep-node", false, "leave the node's tables, bridge and state in place")
	force := fs.Bool("force", false, "remove the node resources even while pods are wired")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if !parseFlags(fs, args) {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "podwire uninstall: %v\n", err)
		return 1
	}

	// What the node resources are named: the entry being removed says it.
	var entry []byte
	if *conflist != "" {
		if data, err := os.ReadFile(*conflist); err == nil {
			if e, ok, err := install.Entry(data); err != nil {
				return fail(fmt.Errorf("conflist %q: %w", *conflist, err))
			} else if ok {
				entry = e
			}
		} else if !os.IsNotExist(err) {
			return fail(fmt.Errorf("failed to read conflist %q: %w", *conflist, err))
		}
	}
	if entry == nil && *cfg != "" {
		e, err := readEntry(*cfg)
		if err != nil {
			return fail(err)
		}
		entry = e
	}
	conf, err := parseEntry(entry)
	if err != nil {
		return fail(err)
	}
	if !*keepNode && !*force {
		// Refuse before anything changes.
		if err := install.CheckNoAttachments(conf.StateDir); err != nil {
			return fail(err)
		}
	}

	out := struct {
		*install.Result
		Node *install.NodeResult `json:"node,omitempty"`
	}{}
	if out.Result, err = install.Uninstall(install.Options{BinDir: *binDir, Conflist: *conflist}); err != nil {
		return fail(err)
	}
	if !*keepNode {
		if out.Node, err = install.RemoveNode(install.NodeOptions{StateDir: conf.StateDir, Bridge: conf.Bridge, Uplink: conf.Uplink, Force: *force}); err != nil {
			return fail(err)
		}
	}
	if *asJSON {
		return printJSON(stdout, stderr, out)
	}
	if *conflist != "" {
		fmt.Fprintf(stdout, "conflist %s: %s\n", *conflist, changedWord(out.ConflistChanged, "podwire entry removed"+backupNote(out.Backup)))
	}
	if out.Binary != "" {
		fmt.Fprintf(stdout, "binary %s: %s\n", out.Binary, changedWord(out.BinaryChanged, "removed"))
	}
	if n := out.Node; n != nil {
		for _, t := range n.Tables {
			fmt.Fprintf(stdout, "nftables table %s: removed\n", t)
		}
		if n.Uplink != "" {
			fmt.Fprintf(stdout, "uplink %s: released from bridge %s\n", n.Uplink, n.Bridge)
		}
		if n.Bridge != "" {
			fmt.Fprintf(stdout, "bridge %s: removed\n", n.Bridge)
		}
		if n.StateDir != "" {
			fmt.Fprintf(stdout, "state dir %s: removed\n", n.StateDir)
		}
		for _, k := range n.Kept {
			fmt.Fprintf(stdout, "kept %s\n", k)
		}
	}
	return 0
}

// readEntry reads a podwire entry given as JSON or @FILE and validates it
// with the plugin's own config parser, so that a bad config fails now and
// not at the node's next pod.
func readEntry(v string) ([]byte, error) {
	data := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if data, err = os.ReadFile(name); err != nil {
			return nil, fmt.Errorf("failed to read config file %q: %w", name, err)
		}
	}
	if _, err := parseEntry(data); err != nil {
		return nil, err
	}
	return data, nil
}

// parseEntry runs a podwire entry (nil: an empty one) through config.Parse
// (install.ParseEntry) and returns the defaulted config.
func parseEntry(entry []byte) (*config.NetConf, error) { return install.ParseEntry(entry) }

func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "podwire: %v\n", err)
		return 1
	}
	return 0
}

func changedWord(changed bool, what string) string {
	if changed {
		return what
	}
	return "unchanged"
}

func backupNote(backup string) string {
	if backup == "" {
		return ""
	}
	return " (previous content in " + backup + ")"
}
