#!/usr/bin/env bash
# multus-build.sh builds, offline from the Go module proxy, Multus thick
# (gopkg.in/k8snetworkplumbingwg/multus-cni.v4) for the multi-node suite's
# TestMultus, and its thin plugin for the single-node suite's
# TestMultusThinClusterNetwork, and caches them keyed by version:
#
#   CACHE/multus-VERSION/{multus-daemon,multus-shim,passthru,multus}
#
# Usage: scripts/multus-build.sh MULTUS_VERSION K8S_VERSION CACHE_DIR
# (the Makefile names the versions).
#
# The three commands its thick image holds (images/Dockerfile.thick), and
# the thin plugin (cmd/multus, the binary of its thin image), in one `go
# build` from a throwaway module. The module also requires the
# Kubernetes client libraries (api, apimachinery, client-go) at the run's
# Kubernetes release (their v0.X.Y), the ones podwire's agent links, so
# that their compiled packages are shared in the Go build cache instead of
# compiled a second time at the older release Multus's go.mod names; Multus
# compiles against them unchanged. k8s.io/kubelet stays at Multus's own
# version: its podresources API renamed a field Multus reads
# (ClaimResource.CDIDevices). The version variables are set as its
# hack/build-go.sh sets them.
#
# Idempotent: a version whose binaries are all present (and whose stamp is
# written last) is not rebuilt.
set -euo pipefail

VERSION=${1:?usage: multus-build.sh MULTUS_VERSION K8S_VERSION CACHE_DIR}
K8S_VERSION=${2:?usage: multus-build.sh MULTUS_VERSION K8S_VERSION CACHE_DIR}
OUT=${3:?usage: multus-build.sh MULTUS_VERSION K8S_VERSION CACHE_DIR}/multus-$VERSION
BINS=(multus-daemon multus-shim passthru multus)
# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"

start_build "$OUT" "$VERSION $K8S_VERSION" "${BINS[@]}"
mod=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
client=v0.${K8S_VERSION#v1.}
go_module "$work" multusbuild "$mod" "$VERSION"
for m in k8s.io/api k8s.io/apimachinery k8s.io/client-go; do
	printf 'require %s %s\n' "$m" "$client" >>"$work/go.mod"
done
echo "multus-build: ${BINS[*]} $VERSION (Kubernetes libraries $client)"
mkdir -p "$work/out"
ldflags="-s -w -X $mod/pkg/multus.version=$VERSION -X $mod/pkg/multus.commit=$VERSION"
(cd "$work" && time "$GO" build -trimpath -ldflags "$ldflags" -o out/ \
	"$mod/cmd/multus-daemon" "$mod/cmd/multus-shim" "$mod/cmd/passthru-cni" "$mod/cmd/multus")
mv "$work/out/passthru-cni" "$work/out/passthru"
finish_build "$OUT" "$VERSION $K8S_VERSION" "${BINS[@]/#/$work/out/}"
