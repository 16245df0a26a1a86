// kubectl-podwire is the cluster-wide view of podwire, a kubectl plugin
// (krew's conventions: the binary kubectl-podwire on PATH is `kubectl
// podwire`; kubectl's own connection flags). It reads the API only: the
// PodwireNodeStatus each node's agent writes (pkg/nodestatus), the agents'
// DaemonSet and pods, and the Nodes; it never logs into a node.
//
//	kubectl podwire status [--node NAME] [-o wide|json|yaml]
//	kubectl podwire pods   [--node NAME] [-n NAMESPACE] [-o wide|json|yaml]
//
// status exits 1 when a node that should run podwire's agent is not
// healthy (podwire.Problems says what healthy is), 2 on a usage error or
// when the API cannot be read. The node-local `podwire status` (the
// plugin binary, on the node) stays the view of one node's kernel state.
package main

import (
	"errors"
	"fmt"
	"os"

	"io"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
)

// errUnhealthy is status's answer when a node is not healthy: exit code 1,
// the table already says which.
var errUnhealthy = errors.New("not every node is healthy")

func main() {
	err := newRoot(os.Stdout).Execute()
	switch {
	case err == nil:
	case errors.Is(err, errUnhealthy):
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "kubectl-podwire:", err)
		os.Exit(2)
	}
}

// options are the flags every command shares.
type options struct {
	// rules and overrides are kubectl's connection flags (--kubeconfig,
	// --context, --server, --token, -n, ...), client-go's clientcmd.
	rules     *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides
	// namespace: -n was given (pods lists that namespace's only).
	namespace bool
	// system is the namespace of podwire's DaemonSet.
	system string
	node   string
	output string
	out    io.Writer
}

func newRoot(out io.Writer) *cobra.Command {
	o := &options{rules: clientcmd.NewDefaultClientConfigLoadingRules(), overrides: &clientcmd.ConfigOverrides{}, out: out}
	root := &cobra.Command{
		Use:           "kubectl-podwire",
		Short:         "podwire's state on every node of the cluster, from the API",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			o.namespace = cmd.Flags().Changed("namespace")
		},
	}
	root.PersistentFlags().StringVar(&o.rules.ExplicitPath, "kubeconfig", "", "the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the pod's service account)")
	clientcmd.BindOverrideFlags(o.overrides, root.PersistentFlags(), clientcmd.RecommendedConfigOverrideFlags(""))
	root.PersistentFlags().StringVar(&o.system, "podwire-namespace", "podwire-system", "the namespace of podwire's agent DaemonSet")
	root.PersistentFlags().StringVar(&o.node, "node", "", "only this node")
	root.PersistentFlags().StringVarP(&o.output, "output", "o", "", "output format: wide, json or yaml (default: a table)")
	root.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "each node's agent, chain, tables, reconcilers and counts; exits 1 when a node is not healthy",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.status(cmd.Context()) },
	})
	root.AddCommand(&cobra.Command{
		Use:   "pods",
		Short: "the pods podwire wired on each node with their gates, and the pods it refused with the gate that refused them",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.pods(cmd.Context()) },
	})
	return root
}

// checkOutput refuses an -o the commands do not print.
func (o *options) checkOutput() error {
	switch o.output {
	case "", "wide", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: want wide, json or yaml", o.output)
}
