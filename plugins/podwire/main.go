// Command podwire is a chained CNI plugin for Kubernetes nodes that run
// network-function pods: per-pod bridge/VLAN wiring, source-IP verification
// lifted for annotated forwarding pods, node-wide nftables tables (load
// balancer probe SNAT, per-node egress IPs) and neighbour announcements.
//
// Run by a container runtime (CNI_COMMAND set) it is a CNI plugin; run by a
// person it is the operator CLI (see cli.go).
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/podwire/podwire/pkg/buildinfo"
	"github.com/podwire/podwire/pkg/config"
	_ "github.com/podwire/podwire/plugins/podwire/internal/oneproc"
)

// main runs the CNI verb or the operator CLI.
//
// The process has one P (package oneproc says why) and its main goroutine
// is not locked to its thread, unlike the reference plugins' main: podwire
// changes a thread's netns only inside ns.Do (and WithNetNSPath), which runs
// the work on a goroutine locked to a thread of its own and lets that thread
// die if it cannot switch back, so every other thread stays in the netns
// the plugin was started in. make lint (forbidigo rules of .golangci.yml)
// fails on any other netns switch or thread lock.
func main() {
	if os.Getenv("CNI_COMMAND") == "" {
		os.Exit(runCLI(os.Args[1:], os.Stdout, os.Stderr))
	}
	p := linuxPlugin()
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    p.cmdAdd,
		Del:    p.cmdDel,
		Check:  p.cmdCheck,
		Status: p.cmdStatus,
		GC:     p.cmdGC,
	}, version.PluginSupports(config.SupportedVersions...), "podwire "+buildinfo.Version)
}
