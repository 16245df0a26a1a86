// Command agentproc runs the node agent (pkg/agent) as a process of its own
// for BenchmarkAgent, against fake API clients: the Node, and a Pod for
// every record in stateDir (so that nothing is collected as stale). It
// runs in the netns it is started in, prints "ready" once the agent is
// Ready, and stops on SIGTERM. It is built from the tree it is in, so the
// same source measures an older agent (scripts/bench.sh builds it).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/podwire/podwire/pkg/agent"
	"github.com/podwire/podwire/pkg/state"
)

func main() {
	stateDir := flag.String("state-dir", "", "podwire's stateDir")
	confDir := flag.String("cni-conf-dir", "", "the CNI conf dir")
	binDir := flag.String("cni-bin-dir", "", "the CNI bin dir")
	plugin := flag.String("plugin", "", "the podwire binary to install")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile to this file from SIGUSR1 to SIGUSR2 (BenchmarkAgent's idle window)")
	flag.Parse()
	if *cpuProfile != "" {
		go profile(*cpuProfile)
	}
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		log.Fatal(err)
	}
	objs := []runtime.Object{&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "bench-node", UID: "bench-node-uid"}}}
	recs, err := state.New(*stateDir).List()
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		objs = append(objs, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: r.PodNamespace, Name: r.PodName, UID: ktypes.UID(r.PodUID)}})
	}
	md := metadatafake.NewSimpleMetadataClient(scheme, objs...)
	cfg := agent.Config{
		Node: "bench-node", StateDir: *stateDir, UnknownInterfaces: agent.UnknownDrop,
		Chain: agent.Chain{ConfDir: *confDir, BinDir: *binDir, Plugin: *plugin, Mode: agent.ModeAuto},
	}
	a := agent.New(cfg, md, kfake.NewSimpleClientset().CoreV1(), slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		for ctx.Err() == nil {
			if a.Status().Ready {
				fmt.Println("ready")
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if err := a.Run(ctx); err != nil {
		log.Print(err)
	}
}

// profile writes a CPU profile to path from SIGUSR1 to SIGUSR2.
func profile(path string) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	for s := range sig {
		switch s {
		case syscall.SIGUSR1:
			f, err := os.Create(path)
			if err == nil {
				err = pprof.StartCPUProfile(f)
			}
			if err != nil {
				log.Print(err)
			}
		case syscall.SIGUSR2:
			pprof.StopCPUProfile()
		}
	}
}
