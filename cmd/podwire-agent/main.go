// Command podwire-agent is podwire's node agent, run on every node by the
// DaemonSet of deploy/ (see pkg/agent). It lives in cmd/ rather than
// plugins/: plugins/ holds what a runtime execs (as in
// containernetworking/plugins), and the agent is a long-running daemon, the
// only podwire binary that links client-go.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/podwire/podwire/pkg/agent"
	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/buildinfo"
	"github.com/podwire/podwire/pkg/config"
)

func main() {
	// Until the flags are read: a bad flag is reported in the default
	// format.
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(&log); err != nil {
		log.Error("podwire-agent failed", "error", err)
		os.Exit(1)
	}
}

// run runs the agent; it replaces *logp by the logger the flags ask for,
// so that main reports run's error in that format.
func run(logp **slog.Logger) error {
	node := flag.String("node-name", os.Getenv("NODE_NAME"), "this node's name (the DaemonSet sets NODE_NAME from spec.nodeName)")
	id := flag.String("id", os.Getenv("POD_UID"), "this agent's ID in stateDir's owner file: its pod's UID (the DaemonSet sets POD_UID from metadata.uid; empty: unique to the process)")
	stateDir := flag.String("state-dir", config.DefaultStateDir, "podwire's stateDir (host path, mounted at the same path)")
	confDir := flag.String("cni-conf-dir", "/etc/cni/net.d", "the host's CNI conf dir")
	binDir := flag.String("cni-bin-dir", "/opt/cni/bin", "the host's CNI bin dir")
	plugin := flag.String("plugin", "/podwire", "the podwire plugin binary to install")
	entry := flag.String("config", os.Getenv("PODWIRE_CONFIG"), "podwire's conflist entry as JSON (empty: keep the existing one or the default)")
	mode := flag.String("mode", agent.ModeAuto, "how to keep podwire in the chain: auto (per primary), edit, derive")
	interval := flag.Duration("interval", 10*time.Second, "backstop period of the chain's reconciler; a write in the CNI conf dir is answered at once")
	repairInterval := flag.Duration("repair-interval", time.Minute, "backstop period of the node tables' repair and of the reconcilers that follow the kernel and the API; another owner's change to podwire's tables or VLAN wiring is repaired at once, from the kernel's notifications")
	health := flag.String("health-addr", "127.0.0.1:9765", "address of /healthz and /readyz (empty: none)")
	metricsAddr := flag.String("metrics-bind-address", "", "address of Prometheus /metrics, e.g. :9178 (empty: none)")
	logFormat := flag.String("log-format", agent.LogText, "log format on stderr: text or json (client-go's klog lines too)")
	logLevel := flag.String("log-level", "info", "least level logged: debug, info, warn or error")
	uninstall := flag.Bool("cni-uninstall", false, "when the agent's stop is an uninstall (its DaemonSet --daemonset is gone), take podwire out of the chain, and out of the node with the last DEL")
	daemonSet := flag.String("daemonset", "", "the agent's own DaemonSet as NAMESPACE/NAME, which --cni-uninstall watches")
	hostConfDir := flag.String("host-cni-conf-dir", "", "the node's path of --cni-conf-dir when the agent sees it elsewhere (a hostPath mount): the uninstall marker names the node's paths (empty: --cni-conf-dir)")
	startupTaint := flag.String("startup-taint", agent.DefaultStartupTaint, "key of the node's startup taint, removed (whatever its effect) once the agent is Ready and put back while podwire is out of the runtime's chain (empty: leave taints alone)")
	taintEffect := flag.String("startup-taint-effect", string(corev1.TaintEffectNoSchedule), "the effect the startup taint is put back with: NoSchedule (new pods kept off) or NoExecute (also evicts the node's pods that do not tolerate it)")
	unknownIfs := flag.String("unknown-interfaces", agent.UnknownDrop, "pod interfaces without a podwire record (pods wired while podwire was out of the chain): drop (reported, and their sources checked: a routed veth only from the addresses the node routes to it, a bridge port from none) or report (status, metric, Node Event only)")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig for running outside a pod (default: the in-cluster config)")
	showVersion := flag.Bool("version", false, "print the version, the commit and the agent protocol, and exit")
	flag.Parse()
	if *showVersion {
		fmt.Printf("podwire-agent %s\nagent protocol: %d (reads %d-%d)\n", buildinfo.String(),
			agentapi.Proto, agentapi.MinProto, agentapi.Proto)
		return nil
	}
	log, err := agent.NewLogger(os.Stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	if *startupTaint != "" {
		if err := config.ValidateLabelKey(*startupTaint); err != nil {
			return fmt.Errorf("invalid --startup-taint: %w", err)
		}
	}
	if e := corev1.TaintEffect(*taintEffect); e != corev1.TaintEffectNoSchedule && e != corev1.TaintEffectNoExecute {
		return fmt.Errorf("invalid --startup-taint-effect %q: NoSchedule or NoExecute", *taintEffect)
	}
	if *unknownIfs != agent.UnknownReport && *unknownIfs != agent.UnknownDrop {
		return fmt.Errorf("invalid --unknown-interfaces %q: report or drop", *unknownIfs)
	}
	*logp = log
	// client-go logs through klog: through the same handler, so that one
	// format and one level hold for every line of the agent.
	klog.SetSlogLogger(log)
	if *node == "" {
		return fmt.Errorf("no node name: set --node-name or NODE_NAME")
	}
	var cfg *rest.Config
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("failed to load the API client config: %w", err)
	}
	cfg.UserAgent = "podwire-agent/" + buildinfo.Version
	// Every request but the informers' watches fails after 10 s
	// (RequestTimeout says why not rest.Config.Timeout).
	agent.RequestTimeout(cfg, 10*time.Second)
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	core, err := v1.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// The Node reads, whole: in protobuf (ProtobufConfig says why). One
	// GET per Node whose PodwireNode changes (agent.PodwireNodeResource),
	// served from the apiserver's watch cache: when many Nodes change at
	// once (a fleet joining, a tenth of the nodes' routes), client-go's
	// default of 5 requests a second would spread them over minutes.
	nodesCfg := agent.ProtobufConfig(cfg)
	nodesCfg.QPS, nodesCfg.Burst = 50, 500
	nodesCore, err := v1.NewForConfig(nodesCfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var un *agent.Uninstall
	if *uninstall {
		ns, name, err := agent.ParseDaemonSet(*daemonSet)
		if err != nil {
			return fmt.Errorf("--cni-uninstall needs --daemonset: %w", err)
		}
		un = agent.NewUninstall(md, ns, name, 10*time.Minute)
	}
	var e []byte
	if *entry != "" {
		e = []byte(*entry)
	}
	a := agent.New(agent.Config{
		Node: *node, ID: *id, StateDir: *stateDir,
		Version: buildinfo.Version,
		Chain: agent.Chain{ConfDir: *confDir, HostConfDir: *hostConfDir, BinDir: *binDir, Plugin: *plugin, Entry: e, Mode: *mode,
			NetworkAttachment: agent.NetworkAttachments(dyn)},
		Serve:  agent.Serve{HealthAddr: *health, MetricsAddr: *metricsAddr},
		Timing: agent.Timing{Interval: *interval, RepairInterval: *repairInterval},
		Taint:  agent.Taint{Key: *startupTaint, Effect: corev1.TaintEffect(*taintEffect), Nodes: core},
		Cluster: agent.ClusterWatch{
			Nodes:     agent.NewClusterNodes(nodesCore.RESTClient(), dyn, *node, *stateDir, 10*time.Minute, log),
			Claims:    agent.NewClaims(dyn, *node, log),
			Uninstall: un,
		},
		UnknownInterfaces: *unknownIfs,
		NodeStatus:        dyn.Resource(agent.NodeStatusResource),
	}, md, core, log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return a.Run(ctx)
}
