#!/usr/bin/env bash
# calico-build.sh builds, offline from the Go module proxy, the Calico
# binaries that integration/k8s/calico's images hold, and caches them
# keyed by version:
#
#   CACHE/calico-VERSION/{calico-node,calico,install}
#
# Usage: scripts/calico-build.sh CALICO_VERSION CACHE_DIR (the Makefile
# names the version; scripts/calico/go.mod names the module versions that
# are that release).
#
# The proxy refuses github.com/projectcalico/calico's release tags, but it
# serves the pseudo-version of the tag's commit (v3.30.1 is
# 393b14e729a6), and its api module at the commit the release's images
# were built with. Calico's go.mod replaces api and lib/std with its own
# directories, which are not in the module's zip, and every k8s.io module
# with one release: scripts/calico/go.mod carries those replace lines, with
# the modules' own versions, and names the three commands as tools, so
# that go.sum pins every hash (the checksum database does not know these
# pseudo-versions; it was written once with GONOSUMDB=github.com/projectcalico).
#
# - calico-node: node/cmd/calico-node, the one binary of calico/node's
#   image that runs Felix, the start-up, the tunnel address allocator and
#   the probes (Felix's BPF mode needs cgo and is off: FELIX_BPFENABLED).
# - calico: cni-plugin/cmd/calico, the CNI plugin, and calico-ipam as the
#   same binary under that name (it dispatches on argv[0], as calico/cni's
#   image links it).
# - install: cni-plugin/cmd/install, calico/cni's install-cni.
#
# The ldflags are Calico's own (node/Makefile, cni-plugin/Makefile), so
# that `calico-node -v` and the plugin's VERSION answer name the release.
#
# Idempotent: a version whose binaries are all present (and whose stamp is
# written last) is not rebuilt.
set -euo pipefail

VERSION=${1:?usage: calico-build.sh CALICO_VERSION CACHE_DIR}
OUT=${2:?usage: calico-build.sh CALICO_VERSION CACHE_DIR}/calico-$VERSION
MODDIR=$(cd "$(dirname "$0")/calico" && pwd)
STAMP="$VERSION $(sha256sum "$MODDIR/go.mod" | cut -c1-16)"
# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"

start_build "$OUT" "$STAMP" calico-node calico install

cp "$MODDIR/go.mod" "$MODDIR/go.sum" "$work/"
mkdir -p "$work/out"
node=github.com/projectcalico/calico/node
echo "calico-build: calico-node, calico and install of Calico $VERSION"
(cd "$work" && time GOFLAGS=-mod=readonly "$GO" build -trimpath -ldflags "-s -w \
	-X $node/pkg/lifecycle/startup.VERSION=$VERSION -X $node/buildinfo.GitVersion=$VERSION \
	-X main.VERSION=$VERSION" -o out/ \
	$node/cmd/calico-node github.com/projectcalico/calico/cni-plugin/cmd/calico \
	github.com/projectcalico/calico/cni-plugin/cmd/install)

finish_build "$OUT" "$STAMP" "$work/out/calico-node" "$work/out/calico" "$work/out/install"
