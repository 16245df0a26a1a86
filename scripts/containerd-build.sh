#!/usr/bin/env bash
# containerd-build.sh builds, offline from the Go module proxy, the container
# runtime that the Kubernetes suites' nodes and the CRI suite run, and caches
# it keyed by version:
#
#   CACHE/containerd-VERSION/{containerd,containerd-shim-runc-v2,ctr}
#   CACHE/runc-RUNC_VERSION/runc
#
# Usage: scripts/containerd-build.sh CONTAINERD_VERSION RUNC_VERSION CACHE_DIR
# (the Makefile names the versions; RUNC_VERSION is the one containerd's
# script/setup/runc-version names for that release).
#
# containerd: one `go build` of cmd/containerd, cmd/containerd-shim-runc-v2
# and cmd/ctr from a throwaway module that requires
# github.com/containerd/containerd/v2, with CGO_ENABLED=0, so the three are
# static and share their compiled packages. containerd's own Makefile builds
# the shim with the no_grpc tag, which only makes it smaller: one set of tags
# keeps the build to one invocation. The btrfs snapshotter needs cgo and is
# left out (the suites use overlayfs). version.Version and version.Revision
# are what `containerd --version` prints, set as containerd's Makefile does.
#
# runc: its main package with cgo (libcontainer/nsenter is C) and the seccomp
# tag, linked statically against Debian's libseccomp-dev (libseccomp.a) as
# runc's `make static` does. Its libpathrs tag is left out: libpathrs is a
# Rust library Debian 12 does not package, and runc falls back to its Go path
# resolution without it. runc embeds its VERSION file, so `runc --version`
# names the release.
#
# Idempotent: a version whose binaries are all present (and whose stamp is
# written last) is not rebuilt. Outputs are moved into place only when the
# whole build succeeded.
set -euo pipefail

VERSION=${1:?usage: containerd-build.sh CONTAINERD_VERSION RUNC_VERSION CACHE_DIR}
RUNC_VERSION=${2:?usage: containerd-build.sh CONTAINERD_VERSION RUNC_VERSION CACHE_DIR}
CACHE=${3:?usage: containerd-build.sh CONTAINERD_VERSION RUNC_VERSION CACHE_DIR}
CONTAINERD_OUT=$CACHE/containerd-$VERSION
RUNC_OUT=$CACHE/runc-$RUNC_VERSION
CONTAINERD_BINS=(containerd containerd-shim-runc-v2 ctr)

# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"

build_containerd() {
	local work
	work=$(mktemp -d /tmp/podwire-containerdbuild.XXXXXX)
	trap 'rm -rf "$work"' RETURN
	go_module "$work" containerdbuild github.com/containerd/containerd/v2 "$VERSION"
	echo "containerd-build: building ${CONTAINERD_BINS[*]} $VERSION"
	local pkg=github.com/containerd/containerd/v2
	mkdir -p "$work/out"
	(cd "$work" && time "$GO" build -trimpath -tags urfave_cli_no_docs \
		-ldflags "-s -w -X $pkg/version.Version=$VERSION -X $pkg/version.Revision=$VERSION -X $pkg/version.Package=$pkg" \
		-o out/ "${CONTAINERD_BINS[@]/#/$pkg/cmd/}")
	finish_build "$CONTAINERD_OUT" "$VERSION" "${CONTAINERD_BINS[@]/#/$work/out/}"
}

build_runc() {
	local work
	work=$(mktemp -d /tmp/podwire-runcbuild.XXXXXX)
	trap 'rm -rf "$work"' RETURN
	go_module "$work" runcbuild github.com/opencontainers/runc "$RUNC_VERSION"
	echo "containerd-build: building runc $RUNC_VERSION (cgo, static, libseccomp)"
	mkdir -p "$work/out"
	(cd "$work" && time CGO_ENABLED=1 "$GO" build -trimpath -buildmode=pie \
		-tags "seccomp urfave_cli_no_docs netgo osusergo" \
		-ldflags "-s -w -X main.gitCommit=$RUNC_VERSION -linkmode external -extldflags -static-pie" \
		-o out/runc github.com/opencontainers/runc)
	finish_build "$RUNC_OUT" "$RUNC_VERSION" "$work/out/runc"
}

if complete "$CONTAINERD_OUT" "$VERSION" "${CONTAINERD_BINS[@]}"; then
	echo "containerd-build: $CONTAINERD_OUT is complete"
else
	build_containerd
fi
if complete "$RUNC_OUT" "$RUNC_VERSION" runc; then
	echo "containerd-build: $RUNC_OUT is complete"
else
	build_runc
fi
