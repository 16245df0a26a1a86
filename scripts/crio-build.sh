#!/usr/bin/env bash
# crio-build.sh builds, offline from the Go module proxy, the CRI-O that the
# single-node Kubernetes suite's CRI-O leg runs, and caches it keyed by
# version:
#
#   CACHE/crio-VERSION/{crio,pinns}
#
# Usage: scripts/crio-build.sh VERSION CACHE_DIR (the Makefile names the
# version).
#
# crio: its main package from a throwaway module that requires
# github.com/cri-o/cri-o (its go.mod has no replace lines, so the module's
# build list is upstream's). cgo is on for the seccomp tag: without it CRI-O
# runs every container with no seccomp filter at all, RuntimeDefault
# included. The tags are upstream's Makefile's as its probes pick them on
# Debian 12 without gpgme or btrfs headers: containers_image_openpgp (the
# pure-Go signature mechanism instead of gpgme), exclude_graphdriver_btrfs,
# seccomp (Debian's libseccomp-dev), and libsqlite3 so that go-sqlite3 links
# Debian's libsqlite3 instead of compiling its amalgamation. The version is a
# constant in the source; `crio version` prints it and the tags.
#
# pinns: the C program CRI-O creates every sandbox's namespaces with
# (pinns/src in the module zip), built static and stripped as upstream's
# pinns/Makefile does. crio refuses to start without it.
#
# Idempotent: a version whose binaries are all present (and whose stamp is
# written last) is not rebuilt.
set -euo pipefail

VERSION=${1:?usage: crio-build.sh VERSION CACHE_DIR}
CACHE=${2:?usage: crio-build.sh VERSION CACHE_DIR}
OUT=$CACHE/crio-$VERSION

# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"

start_build "$OUT" "$VERSION" crio pinns
go_module "$work" criobuild github.com/cri-o/cri-o "$VERSION"
mkdir -p "$work/out"
echo "crio-build: building crio $VERSION (cgo: seccomp, Debian's libsqlite3)"
(cd "$work" && time CGO_ENABLED=1 "$GO" build -trimpath \
	-tags "containers_image_openpgp exclude_graphdriver_btrfs seccomp libsqlite3" \
	-ldflags "-s -w" -o out/crio github.com/cri-o/cri-o/cmd/crio)
src=$(cd "$work" && "$GO" list -m -f '{{.Dir}}' github.com/cri-o/cri-o)
echo "crio-build: building pinns"
gcc -std=c99 -Os -Wall -Wextra -static -s -o "$work/out/pinns" "$src"/pinns/src/*.c
finish_build "$OUT" "$VERSION" "$work/out/crio" "$work/out/pinns"
