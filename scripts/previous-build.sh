#!/usr/bin/env bash
# previous-build.sh builds the earlier release that the multi-node suite's
# upgrade test (TestHelmUpgrade) crosses to and from: a commit of main, built
# from that commit's own tree by that tree's own Makefile (`make image`: its
# scripts, its mkimage, its code), so that records, tables, the agent's
# protocol and the chart cross a real version boundary. Cached by commit:
#
#   CACHE/podwire-SHORT/                          the commit's tree (git archive)
#   CACHE/podwire-SHORT/bin/podwire-image.tar     its image, the node's platform only
#   CACHE/podwire-SHORT/deploy/helm/podwire       its chart
#
# Usage: scripts/previous-build.sh COMMIT REGISTRY CACHE_DIR
# (the Makefile names the commit, PREVIOUS_COMMIT). The image is
# REGISTRY/podwire-agent:VERSION, VERSION being the commit's own
# (scripts/version.sh COMMIT: v0.1.0-<commits>-g<hash> while there is no
# tag), stamped into both binaries with the commit, as that commit's build
# from a clean checkout would have stamped them. The repository's history
# must hold the commit (a clean clone of main does).
#
# Idempotent: a tree whose stamp (written last) names the same commit,
# version, registry and platform is not rebuilt. The tree is built in a
# work directory beside it and moved into place only when the build
# succeeded.
set -euo pipefail

usage="usage: previous-build.sh COMMIT REGISTRY CACHE_DIR"
REV=${1:?$usage}
REGISTRY=${2:?$usage}
CACHE=${3:?$usage}
GO=${GO:-go}
cd "$(dirname "$0")/.."

commit=$(git rev-parse --verify "$REV^{commit}")
short=${commit:0:7}
version=$(scripts/version.sh "$commit")
platform=linux/$("$GO" env GOARCH)
out=$CACHE/podwire-$short
stamp="$commit $version $REGISTRY $platform"
if [[ -f $out/.stamp && $(cat "$out/.stamp") == "$stamp" && -f $out/bin/podwire-image.tar ]]; then
	echo "previous-build: $out is complete ($version)"
	exit 0
fi

mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/.podwire-$short.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "previous-build: podwire $version ($commit) from its own tree, $platform"
git archive "$commit" | tar -x -C "$work"
# The old Makefile gets VERSION and COMMIT from here, not from git: its
# tree lies inside this checkout, whose HEAD is another commit. MAKEFLAGS
# and friends are dropped so that the caller's command-line variables
# (`make VERSION=...`, K8S_RUN, ...) do not reach it. GOFLAGS and
# CGO_ENABLED are its own Makefile's, the same as this one's, so the Go
# build cache serves both trees' unchanged packages.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES
time make -C "$work" image VERSION="$version" COMMIT="$commit" REGISTRY="$REGISTRY" PLATFORMS="$platform"
rm -rf "$out"
mv "$work" "$out"
echo "$stamp" >"$out/.stamp"
