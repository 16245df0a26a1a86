#!/usr/bin/env bash
# helm-build.sh builds, offline from the Go module proxy, the helm CLI that
# integration/k8s runs to install, upgrade and uninstall podwire's chart as
# a user does, and caches it keyed by version:
#
#   CACHE/helm-VERSION/helm
#
# Usage: scripts/helm-build.sh HELM_VERSION CACHE_DIR
# (the Makefile names the version: the one tools/chart renders with).
#
# helm.sh/helm/v3's go.mod has no replace directives, so its cmd/helm
# builds from a throwaway module that requires it. The version variable of
# internal/version is set at link time, as helm's own Makefile does, so
# that `helm version` says VERSION and not the bare "v3.x" default.
#
# Idempotent: a version whose binary is present (and whose stamp is written
# last) is not rebuilt. The output is moved into place only when the build
# succeeded.
set -euo pipefail

VERSION=${1:?usage: helm-build.sh HELM_VERSION CACHE_DIR}
CACHE=${2:?usage: helm-build.sh HELM_VERSION CACHE_DIR}
GO=${GO:-go}
OUT=$CACHE/helm-$VERSION

# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"

if complete "$OUT" "$VERSION" helm; then
	echo "helm-build: $OUT is complete"
	exit 0
fi

work=$(mktemp -d /tmp/podwire-helmbuild.XXXXXX)
trap 'rm -rf "$work"' EXIT
gover=$("$GO" env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')
printf 'module podwire.local/helmbuild\n\ngo %s\n\nrequire helm.sh/helm/v3 %s\n' "$gover" "$VERSION" >"$work/go.mod"
echo "helm-build: helm $VERSION (helm.sh/helm/v3/cmd/helm)"
mkdir -p "$work/out"
(cd "$work" && time "$GO" build -trimpath \
	-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
	-o out/helm helm.sh/helm/v3/cmd/helm)
mkdir -p "$OUT"
mv -f "$work/out/helm" "$OUT/helm"
echo "$VERSION" >"$OUT/.stamp"
