#!/usr/bin/env bash
# kwok-build.sh builds, offline from the Go module proxy, kwok's controller
# (sigs.k8s.io/kwok/cmd/kwok), which `make bench-scale` runs beside its
# apiserver to keep thousands of fake Nodes and their pods alive, and
# caches it keyed by version:
#
#   CACHE/kwok-VERSION/kwok
#   CACHE/kwok-VERSION/stages.yaml
#
# Usage: scripts/kwok-build.sh KWOK_VERSION CACHE_DIR
#
# sigs.k8s.io/kwok's go.mod has no replace directives, so cmd/kwok builds
# from a throwaway module that requires it. kwok does nothing without Stage
# objects: stages.yaml is the release's own node and pod stages (kustomize/
# stage: node-initialize, node-heartbeat-with-lease, pod-ready), copied from
# the same module, so that the fake Nodes behave as that release documents
# (Ready at once, a status heartbeat every 10-20 minutes, the liveness in
# their Leases).
#
# Idempotent: a version whose binary and stages are present (and whose
# stamp is written last) is not rebuilt.
set -euo pipefail

VERSION=${1:?usage: kwok-build.sh KWOK_VERSION CACHE_DIR}
OUT=${2:?usage: kwok-build.sh KWOK_VERSION CACHE_DIR}/kwok-$VERSION
# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"

start_build "$OUT" "$VERSION" kwok
go_module "$work" kwokbuild sigs.k8s.io/kwok "$VERSION"
echo "kwok-build: kwok $VERSION (sigs.k8s.io/kwok/cmd/kwok)"
mkdir -p "$work/out"
# consts.Version as kwok's hack/releases.sh sets it: the fake Nodes'
# kubeletVersion reads kwok-VERSION.
(cd "$work" && time "$GO" build -trimpath \
	-ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$VERSION" \
	-o out/kwok sigs.k8s.io/kwok/cmd/kwok)
src=$(cd "$work" && "$GO" list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml pod/fast/pod-ready.yaml; do
	echo "---"
	cat "$src/kustomize/stage/$f"
done >"$work/out/stages.yaml"
finish_build "$OUT" "$VERSION" "$work/out/kwok" "$work/out/stages.yaml"
