#!/usr/bin/env bash
# e2e-build.sh builds, offline from the Go module proxy, Kubernetes' own
# end-to-end suite (the test binary of k8s.io/kubernetes/test/e2e) that the
# multi-node suite's conformance test runs, and caches it next to the
# binaries of k8s-build.sh:
#
#   CACHE/k8s-VERSION/e2e.test
#   CACHE/k8s-VERSION/agnhost-files/{localhost.crt,localhost.key}
#
# The second are the files upstream's agnhost image adds besides the
# binary (test/images/agnhost/Dockerfile: porter's TLS certificate and
# key, which `agnhost porter` serves its TLS ports with), copied from the
# same source tree.
#
# Usage: scripts/e2e-build.sh K8S_VERSION CACHE_DIR
#
# The same throwaway module as k8s-build.sh, k8s-module.sh's (it says why).
# `go test -c` of test/e2e compiles little more than what k8s-build.sh has
# left in the Go build cache: the e2e framework and the specs. The version
# variables are set at link time as for the other binaries (k8s_ldflags).
#
# Idempotent: an e2e.test whose stamp (.stamp-e2e, written last) names the
# version is not rebuilt; the binary is moved into place only when the
# build succeeded.
set -euo pipefail

K8S_VERSION=${1:?usage: e2e-build.sh K8S_VERSION CACHE_DIR}
OUT=${2:?usage: e2e-build.sh K8S_VERSION CACHE_DIR}/k8s-$K8S_VERSION

# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"
# shellcheck source=k8s-module.sh
source "$(dirname "$0")/k8s-module.sh"

if [[ -x $OUT/e2e.test && -f $OUT/agnhost-files/localhost.key && -f $OUT/.stamp-e2e && $(cat "$OUT/.stamp-e2e") == "$K8S_VERSION" ]]; then
	echo "e2e-build: $OUT/e2e.test is complete"
	exit 0
fi

work=$(mktemp -d /tmp/podwire-e2ebuild.XXXXXX)
trap 'rm -rf "$work"' EXIT
k8s_module "$work" e2ebuild
ldflags=$(k8s_ldflags)
src=$(cd "$work" && "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[[ -f $src/test/images/agnhost/porter/localhost.crt ]] || { echo "e2e-build: no test/images/agnhost/porter in $src" >&2; exit 1; }
mkdir -p "$work/agnhost-files"
cp "$src/test/images/agnhost/porter/localhost.crt" "$src/test/images/agnhost/porter/localhost.key" "$work/agnhost-files/"
echo "e2e-build: go test -c k8s.io/kubernetes/test/e2e"
# -vet=off: go test vets the package it builds, even with -c; upstream's
# test code is not podwire's to vet, and the vet pass costs a cold build
# minutes.
(cd "$work" && time "$GO" test -c -vet=off -trimpath -ldflags="$ldflags" -o e2e.test k8s.io/kubernetes/test/e2e)
mkdir -p "$OUT"
mv -f "$work/e2e.test" "$OUT/e2e.test"
rm -rf "$OUT/agnhost-files"
mv "$work/agnhost-files" "$OUT/agnhost-files"
chmod -R a+rX "$OUT/agnhost-files"
echo "$K8S_VERSION" >"$OUT/.stamp-e2e"
