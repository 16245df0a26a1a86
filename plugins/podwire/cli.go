package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/buildinfo"
	"github.com/podwire/podwire/pkg/config"
)

// cliCommand is one subcommand of the operator CLI.
type cliCommand struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// cliCommands are the subcommands; other files register theirs in init().
var cliCommands = map[string]cliCommand{
	"version": {"print podwire's version and supported CNI spec versions", cliVersion},
}

func runCLI(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	cmd, ok := cliCommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "podwire: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "podwire %s: a chained CNI plugin for network-function pods.\n\n", buildinfo.Version)
	fmt.Fprintln(w, "Run by a container runtime with CNI_COMMAND set, it is a CNI plugin.")
	fmt.Fprintln(w, "Run by a person:")
	names := make([]string, 0, len(cliCommands))
	for n := range cliCommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  podwire %-10s %s\n", n, cliCommands[n].summary)
	}
}

// cliVersion prints the build (pkg/buildinfo: version, commit, Go), the CNI
// spec versions and the agent protocol versions this plugin speaks.
func cliVersion(_ []string, stdout, _ io.Writer) int {
	fmt.Fprintf(stdout, "podwire %s\nCNI spec versions: %s\nagent protocol: %d (reads %d-%d)\n", buildinfo.String(),
		strings.Join(config.SupportedVersions, ", "), agentapi.Proto, agentapi.MinProto, agentapi.Proto)
	return 0
}
