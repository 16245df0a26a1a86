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
OUT=${2:?usage: helm-build.sh HELM_VERSION CACHE_DIR}/helm-$VERSION
# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"

start_build "$OUT" "$VERSION" helm
go_module "$work" helmbuild helm.sh/helm/v3 "$VERSION"
echo "helm-build: helm $VERSION (helm.sh/helm/v3/cmd/helm)"
mkdir -p "$work/out"
(cd "$work" && time "$GO" build -trimpath \
	-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
	-o out/helm helm.sh/helm/v3/cmd/helm)
finish_build "$OUT" "$VERSION" "$work/out/helm"
