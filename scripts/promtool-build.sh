#!/usr/bin/env bash
# promtool-build.sh builds, offline from the Go module proxy, Prometheus'
# promtool (github.com/prometheus/prometheus/cmd/promtool), with which
# `make lint` checks the chart's PrometheusRule (`promtool check rules`) and
# evaluates its alerts on series (`promtool test rules`), and the
# multi-node suite evaluates them on the agents' own scrapes. It caches it
# keyed by version:
#
#   CACHE/promtool-VERSION/promtool
#
# Usage: scripts/promtool-build.sh PROMETHEUS_MODULE_VERSION CACHE_DIR
#
# The module's versions are v0.MAJORMINOR.PATCH of the Prometheus release
# (v0.316.0 is Prometheus 3.16.0). Its go.mod has no replace directives, so
# cmd/promtool builds from a throwaway module that requires it. The build
# tag remove_all_sd (Prometheus' own, plugins/) leaves out the service
# discoveries (the cloud providers' SDKs, Kubernetes' client), which only
# `promtool check config` of a scrape configuration would use: most of a
# cold build's packages.
#
# Idempotent: a version whose binary is present (and whose stamp is written
# last) is not rebuilt.
set -euo pipefail

VERSION=${1:?usage: promtool-build.sh PROMETHEUS_MODULE_VERSION CACHE_DIR}
OUT=${2:?usage: promtool-build.sh PROMETHEUS_MODULE_VERSION CACHE_DIR}/promtool-$VERSION
# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"

start_build "$OUT" "$VERSION" promtool
go_module "$work" promtoolbuild github.com/prometheus/prometheus "$VERSION"
echo "promtool-build: promtool $VERSION (github.com/prometheus/prometheus/cmd/promtool)"
mkdir -p "$work/out"
(cd "$work" && time "$GO" build -trimpath -tags remove_all_sd -ldflags "-s -w" -o out/promtool github.com/prometheus/prometheus/cmd/promtool)
finish_build "$OUT" "$VERSION" "$work/out/promtool"
