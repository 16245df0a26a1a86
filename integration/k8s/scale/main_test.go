// Package scale is podwire's scale bench against a real apiserver
// (`make bench-scale`): a cluster of the cluster package (two real nodes,
// kubelets over containerd, ptp), kwok's controller beside its apiserver
// keeping thousands of fake Nodes (and their pods) alive, and on each real
// node the real agent binary, run as the chart runs it (its flags, its
// ServiceAccount's token and RBAC, hostNetwork) but as a process of the
// node rather than a DaemonSet's pod, so the bench reads its CPU and RSS
// from /proc and counts what the apiserver sends it through a TCP relay in
// front of it. The fake Nodes carry kwok's taint and no agent runs for
// them.
//
// At each size (PODWIRE_SCALE_SIZES, default 1000,2000,5000 Nodes) it
// measures the agents' RSS and CPU at rest and while a tenth of the Nodes
// change their podwire.io/routes, the time from a Node's change to the
// route on every real node, the bytes the apiserver sent each agent, and
// the apiserver's CPU, RSS and Node watch events (its /metrics). The
// figures go to PODWIRE_SCALE_OUT as "scale-..." lines, which
// integration/bench/report puts into docs/benchmarks.md.
//
// Needs root and PODWIRE_K8S_BIN, PODWIRE_ETCD, PODWIRE_CONTAINERD_DIR,
// PODWIRE_RUNC, PODWIRE_CNI_BIN, PODWIRE_BIN, PODWIRE_AGENT_BIN and
// PODWIRE_KWOK (scripts/kwok-build.sh's directory); make bench-scale sets
// them.
package scale

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

var (
	c   *cluster.Cluster
	env map[string]string
)

var suite = cluster.Suite{
	Env: append([]string{"PODWIRE_K8S_BIN", "PODWIRE_ETCD", "PODWIRE_BIN", "PODWIRE_AGENT_BIN", "PODWIRE_CNI_BIN", "PODWIRE_KWOK"},
		cluster.RuntimeEnv...),
	Timeout: 4 * time.Minute,
	Options: func(env map[string]string) cluster.Options {
		return cluster.Options{K8sBinDir: env["PODWIRE_K8S_BIN"], EtcdBin: env["PODWIRE_ETCD"], CNIBinDir: env["PODWIRE_CNI_BIN"],
			Nodes: 2, PTPCNIVersion: "1.1.0"}
	},
	Setup: func(ctx context.Context, cl *cluster.Cluster, e map[string]string) (func(), error) {
		c, env = cl, e
		fmt.Println("versions:")
		for _, l := range append(c.Versions(ctx),
			cluster.VersionLine(ctx, "podwire-agent", e["PODWIRE_AGENT_BIN"], "--version"),
			cluster.VersionLine(ctx, "kwok", e["PODWIRE_KWOK"]+"/kwok", "--version")) {
			fmt.Println("  " + l)
		}
		return nil, nil
	},
}

func TestMain(m *testing.M) { os.Exit(suite.Main(m)) }
