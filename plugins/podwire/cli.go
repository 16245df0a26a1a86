package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/buildinfo"
	"github.com/podwire/podwire/pkg/config"
)

// cliCommand is one subcommand of the operator CLI.
type cliCommand struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
}

// cliCommands are the subcommands, in the order usage lists them.
var cliCommands = []cliCommand{
	{"collect", "remove a stale attachment (pod gone, DEL never run) by DEL's path (the node agent runs it)", cliCollect},
	{"install", "copy the binary into the CNI bin dir and chain podwire in a conflist", cliInstall},
	{"repair", "verify podwire's node tables and rebuild what drifted (the node agent runs it)", cliRepair},
	{"status", "show node tables, bridge and uplink, wired pods and warnings", cliStatus},
	{"uninstall", "take podwire out of a conflist, the bin dir and the node (tables, bridge, state)", cliUninstall},
	{"version", "print podwire's version and supported CNI spec versions", cliVersion},
}

func runCLI(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	for _, c := range cliCommands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "podwire: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "podwire %s: a chained CNI plugin for network-function pods.\n\n", buildinfo.Version)
	fmt.Fprintln(w, "Run by a container runtime with CNI_COMMAND set, it is a CNI plugin.")
	fmt.Fprintln(w, "Run by a person:")
	for _, c := range cliCommands {
		fmt.Fprintf(w, "  podwire %-10s %s\n", c.name, c.summary)
	}
}

// cliFlags is the flag set of the command whose synopsis is given
// ("podwire install --bin-dir DIR ..."): parse errors and the usage (the
// synopsis, then the flags) go to stderr.
func cliFlags(synopsis string, stderr io.Writer) *flag.FlagSet {
	words := strings.Fields(synopsis)
	fs := flag.NewFlagSet(strings.Join(words[:2], " "), flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses the args of a command that takes no positional
// argument; false means the command exits 2, the error (a bad flag, or the
// first stray argument named) and the usage printed.
func parseFlags(fs *flag.FlagSet, args []string) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return false
	}
	return true
}

// cliVersion prints the build (pkg/buildinfo: version, commit, Go), the CNI
// spec versions and the agent protocol versions this plugin speaks.
func cliVersion(_ []string, stdout, _ io.Writer) int {
	fmt.Fprintf(stdout, "podwire %s\nCNI spec versions: %s\nagent protocol: %d (reads %d-%d)\n", buildinfo.String(),
		strings.Join(config.SupportedVersions, ", "), agentapi.Proto, agentapi.MinProto, agentapi.Proto)
	return 0
}
