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
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/podwire/podwire/pkg/config"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "v0.1.0-dev"

func init() {
	// Namespace switches are per OS thread: keep main on one.
	runtime.LockOSThread()
}

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
	}, version.PluginSupports(config.SupportedVersions...), "podwire "+Version)
}
