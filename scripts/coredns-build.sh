#!/usr/bin/env bash
# coredns-build.sh builds, offline from the Go module proxy, the CoreDNS
# that integration/k8s/multinode runs as the cluster's DNS (kube-dns, as
# kubeadm deploys it), and caches it keyed by version:
#
#   CACHE/coredns-VERSION/coredns
#
# Usage: scripts/coredns-build.sh COREDNS_VERSION CACHE_DIR
# (the Makefile names the version).
#
# CoreDNS is built as a library: a throwaway module that requires
# github.com/coredns/coredns at VERSION, with its own main that imports
# only the plugins of kubeadm's Corefile (errors, health, ready,
# kubernetes, forward, cache, loop, reload, loadbalance, log) and sets
# dnsserver.Directives to them in CoreDNS's own order (plugin.cfg: the
# order a request meets them). CoreDNS's core/plugin would link every
# plugin (cloud DNS backends, etcd, ...) for nothing the cluster uses.
#
# Idempotent: a version whose binary is present (and whose stamp is written
# last) is not rebuilt. The output is moved into place only when the build
# succeeded.
set -euo pipefail

VERSION=${1:?usage: coredns-build.sh COREDNS_VERSION CACHE_DIR}
OUT=${2:?usage: coredns-build.sh COREDNS_VERSION CACHE_DIR}/coredns-$VERSION
# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"

start_build "$OUT" "$VERSION" coredns
go_module "$work" corednsbuild github.com/coredns/coredns "$VERSION"
cat >"$work/main.go" <<'GO'
// Command coredns is CoreDNS with the plugins of a cluster DNS only.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The linked plugins in the order of CoreDNS's plugin.cfg: a directive
// missing here is refused in a Corefile.
func init() {
	dnsserver.Directives = []string{"reload", "ready", "health", "errors", "log",
		"loadbalance", "cache", "kubernetes", "loop", "forward"}
}

func main() { coremain.Run() }
GO
echo "coredns-build: coredns $VERSION (core/dnsserver and the plugins of a cluster DNS)"
mkdir -p "$work/out"
(cd "$work" && time "$GO" build -trimpath -ldflags "-s -w" -o out/coredns .)
finish_build "$OUT" "$VERSION" "$work/out/coredns"
