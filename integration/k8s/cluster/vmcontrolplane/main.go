// Command vmcontrolplane runs the control plane of the VM's cluster suite
// on the VM's host (cluster.StartControlPlane): etcd, the apiserver, the
// controller-manager and the scheduler at native speed instead of under
// TCG, where they were the largest share of the VM's load. scripts/vm-test.sh starts it
// in the network namespace of the VM's tap device, which the VM bridges
// into its nodes' switch. It writes the CA and the apiserver's URL into
// DIR (the VM reads them, cluster.Options.ControlPlane), creates DIR/ready
// once the apiserver is ready, and stops its processes on SIGTERM or
// SIGINT.
//
// Usage: vmcontrolplane -k8s-bin DIR -etcd BIN -dir DIR
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

func main() {
	var o cluster.ControlPlaneOptions
	flag.StringVar(&o.K8sBinDir, "k8s-bin", "", "directory of kube-apiserver, kube-controller-manager and kube-scheduler")
	flag.StringVar(&o.EtcdBin, "etcd", "", "the etcd binary")
	flag.StringVar(&o.Dir, "dir", "", "the control plane's directory (pki/, url, logs/)")
	flag.Parse()
	if o.K8sBinDir == "" || o.EtcdBin == "" || o.Dir == "" {
		flag.Usage()
		os.Exit(2)
	}
	o.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "vmcontrolplane: "+format+"\n", args...) }
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cp, err := cluster.StartControlPlane(ctx, o)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmcontrolplane:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "ready"), nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "vmcontrolplane:", err)
	}
	<-stop
	if err := cp.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "vmcontrolplane: stop:", err)
		os.Exit(1)
	}
}
