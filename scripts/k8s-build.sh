#!/usr/bin/env bash
# k8s-build.sh builds, offline from the Go module proxy, the Kubernetes and
# etcd binaries that integration/k8s runs, and caches them keyed by version:
#
#   CACHE/k8s-VERSION/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kubectl,kube-proxy,agnhost}
#   CACHE/etcd-ETCD_VERSION/etcd
#
# Usage: scripts/k8s-build.sh K8S_VERSION ETCD_VERSION CACHE_DIR
# (the Makefile names the versions, in one place).
#
# The throwaway module that requires k8s.io/kubernetes is k8s-module.sh's
# (it says why). One `go build` of all the commands compiles the shared
# packages once, not once per command (docs/testing.md gives the cold
# time; a warm Go build cache relinks in seconds). The version variables
# are set at link time (k8s_ldflags).
#
# Idempotent: a version whose binaries are all present (and whose stamp is
# written last) is not rebuilt. Outputs are moved into place only when the
# whole build succeeded.
set -euo pipefail

K8S_VERSION=${1:?usage: k8s-build.sh K8S_VERSION ETCD_VERSION CACHE_DIR}
ETCD_VERSION=${2:?usage: k8s-build.sh K8S_VERSION ETCD_VERSION CACHE_DIR}
CACHE=${3:?usage: k8s-build.sh K8S_VERSION ETCD_VERSION CACHE_DIR}

# Each name is a main package of k8s.io/kubernetes (cmd/NAME, or the path
# given after a colon): the control plane, the node (kubelet, kube-proxy),
# kubectl, and agnhost, the test image the multi-node scenarios serve with.
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy agnhost:test/images/agnhost)
K8S_OUT=$CACHE/k8s-$K8S_VERSION
ETCD_OUT=$CACHE/etcd-$ETCD_VERSION

# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"
# shellcheck source=k8s-module.sh
source "$(dirname "$0")/k8s-module.sh"

build_k8s() {
	local work
	work=$(mktemp -d /tmp/podwire-k8sbuild.XXXXXX)
	trap 'rm -rf "$work"' RETURN
	k8s_module "$work" k8sbuild
	echo "k8s-build: building ${K8S_CMDS[*]} (the longest build with a cold Go build cache)"
	local ldflags
	ldflags=$(k8s_ldflags)
	local pkgs=()
	for c in "${K8S_CMDS[@]}"; do
		if [[ $c == *:* ]]; then pkgs+=("k8s.io/kubernetes/${c#*:}"); else pkgs+=("k8s.io/kubernetes/cmd/$c"); fi
	done
	mkdir -p "$work/out"
	(cd "$work" && time "$GO" build -trimpath -ldflags="$ldflags" -o out/ "${pkgs[@]}")
	local bins=("${K8S_CMDS[@]%%:*}")
	finish_build "$K8S_OUT" "$K8S_VERSION" "${bins[@]/#/$work/out/}"
}

build_etcd() {
	local work
	work=$(mktemp -d /tmp/podwire-etcdbuild.XXXXXX)
	trap 'rm -rf "$work"' RETURN
	printf 'module podwire.local/etcdbuild\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$work/go.mod"
	echo "k8s-build: building etcd $ETCD_VERSION (go.etcd.io/etcd/server/v3, a main package)"
	mkdir -p "$work/out"
	(cd "$work" && time "$GO" build -trimpath -ldflags="-s -w" -o out/etcd go.etcd.io/etcd/server/v3)
	finish_build "$ETCD_OUT" "$ETCD_VERSION" "$work/out/etcd"
}

if complete "$K8S_OUT" "$K8S_VERSION" "${K8S_CMDS[@]%%:*}"; then
	echo "k8s-build: $K8S_OUT is complete"
else
	build_k8s
fi
if complete "$ETCD_OUT" "$ETCD_VERSION" etcd; then
	echo "k8s-build: $ETCD_OUT is complete"
else
	build_etcd
fi
