// Package vlan is podwire's test of VLAN network functions under a real
// kubelet: a two-node cluster (package cluster) run inside the VM of
// scripts/vm-test.sh, whose Debian kernel has the bridge VLAN filtering
// and 8021q that the development kernel lacks. The control plane and the
// nodes run in the VM: etcd, the apiserver and the controllers on the
// first node as in the other suites, each node's kubelet over its own
// containerd 2.x and runc.
//
// Needs root, the VM's kernel and what `make test-vm-k8s` passes into the
// VM: PODWIRE_K8S_BIN, PODWIRE_ETCD, PODWIRE_CONTAINERD_DIR, PODWIRE_RUNC
// and PODWIRE_CNI_BIN.
package vlan

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

// nodes is the size of the cluster.
const nodes = 2

var c *cluster.Cluster

var suite = cluster.Suite{
	Env:     []string{"PODWIRE_K8S_BIN", "PODWIRE_ETCD", "PODWIRE_CNI_BIN", "PODWIRE_CONTAINERD_DIR", "PODWIRE_RUNC", "PODWIRE_PAUSE_ARCHIVE"},
	Timeout: 8 * time.Minute,
	Options: func(env map[string]string) cluster.Options {
		return cluster.Options{K8sBinDir: env["PODWIRE_K8S_BIN"], EtcdBin: env["PODWIRE_ETCD"], CNIBinDir: env["PODWIRE_CNI_BIN"],
			Nodes: nodes, PTPCNIVersion: "1.1.0", PauseArchive: env["PODWIRE_PAUSE_ARCHIVE"]}
	},
	Setup: setUp,
}

func TestMain(m *testing.M) { os.Exit(suite.Main(m)) }

func setUp(ctx context.Context, cl *cluster.Cluster, env map[string]string) (func(), error) {
	c = cl
	fmt.Printf("vm-k8s: %d nodes Ready\n", len(c.Nodes))
	fmt.Println("versions:")
	for _, l := range c.Versions(ctx) {
		fmt.Println("  " + l)
	}
	fmt.Printf("  %-24s %s/%s\n", "go", runtime.GOOS, runtime.GOARCH)
	return nil, nil
}

func TestPodStart(t *testing.T) {
	suite.Need(t)
	for i, n := range c.Nodes {
		name := fmt.Sprintf("start-%d", i)
		t0 := time.Now()
		c.MustKubectl(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  nodeName: %s
  containers:
  - {name: c, image: %s, imagePullPolicy: Never}
`, name, n.Name, cluster.PauseImage), "apply", "-f", "-")
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
		out, err := c.Kubectl(ctx, "", "wait", "--for=condition=Ready", "--timeout=90s", "pod/"+name)
		cancel()
		if err != nil {
			d, _ := c.Kubectl(context.Background(), "", "describe", "pod", name)
			t.Fatalf("%v\n%s\ncontainerd:\n%s\nkubelet:\n%s", err, d, c.LogTail("containerd."+n.Name, 3000), c.LogTail("kubelet."+n.Name, 3000))
		}
		t.Logf("%s on %s: %s in %.1fs", name, n.Name, strings.TrimSpace(out), time.Since(t0).Seconds())
	}
}
