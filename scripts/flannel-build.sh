#!/usr/bin/env bash
# flannel-build.sh builds, offline from the Go module proxy, the flannel
# binaries that integration/k8s/multinode's flannel image holds, and caches
# them keyed by version:
#
#   CACHE/flannel-VERSION/{flanneld,install-conf,flannel}
#
# Usage: scripts/flannel-build.sh FLANNEL_VERSION FLANNEL_CNI_VERSION CACHE_DIR
# (the Makefile names the versions).
#
# flanneld: `go install github.com/flannel-io/flannel@VERSION` fails, since
# its tencentvpc backend's module is not served; a copy of its main.go
# without the tencentvpc and udp (cgo) backend imports, in a throwaway
# module that requires flannel at VERSION, builds with CGO_ENABLED=0 (the
# vxlan backend the tests use is kept, as are the others). install-conf is
# flannel's own cmd/install_conf. The flannel CNI plugin (delegating to
# bridge + host-local) is plugins/meta/flannel of
# github.com/containernetworking/plugins at FLANNEL_CNI_VERSION, the last
# release that has it (flannel-io/cni-plugin is not served).
#
# Idempotent: a version whose binaries are all present (and whose stamp is
# written last) is not rebuilt. Outputs are moved into place only when the
# whole build succeeded.
set -euo pipefail

VERSION=${1:?usage: flannel-build.sh FLANNEL_VERSION FLANNEL_CNI_VERSION CACHE_DIR}
CNI_VERSION=${2:?usage: flannel-build.sh FLANNEL_VERSION FLANNEL_CNI_VERSION CACHE_DIR}
OUT=${3:?usage: flannel-build.sh FLANNEL_VERSION FLANNEL_CNI_VERSION CACHE_DIR}/flannel-$VERSION
STAMP="$VERSION $CNI_VERSION"
# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"

start_build "$OUT" "$STAMP" flanneld install-conf flannel

echo "flannel-build: flanneld and install-conf $VERSION"
mkdir -p "$work/flannel/out"
go_module "$work/flannel" flannelbuild github.com/flannel-io/flannel "$VERSION"
src=$(cd "$work/flannel" && "$GO" mod download -json "github.com/flannel-io/flannel@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[[ -f $src/main.go ]] || { echo "flannel-build: no main.go in $src" >&2; exit 1; }
grep -v -e '/pkg/backend/tencentvpc"' -e '/pkg/backend/udp"' "$src/main.go" >"$work/flannel/main.go"
# pkg/version.Version is what `flanneld --version` prints (flannel's
# Makefile sets it the same way).
(cd "$work/flannel" && time "$GO" build -trimpath \
	-ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$VERSION" \
	-o out/flanneld . && "$GO" build -trimpath -ldflags "-s -w" -o out/install-conf github.com/flannel-io/flannel/cmd/install_conf)

echo "flannel-build: the flannel CNI plugin of containernetworking/plugins $CNI_VERSION"
mkdir -p "$work/cni/out"
go_module "$work/cni" flannelcnibuild github.com/containernetworking/plugins "$CNI_VERSION"
(cd "$work/cni" && time "$GO" build -trimpath -ldflags "-s -w" -o out/flannel github.com/containernetworking/plugins/plugins/meta/flannel)

finish_build "$OUT" "$STAMP" "$work/flannel/out/flanneld" "$work/flannel/out/install-conf" "$work/cni/out/flannel"
