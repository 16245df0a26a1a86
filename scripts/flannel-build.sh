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
CACHE=${3:?usage: flannel-build.sh FLANNEL_VERSION FLANNEL_CNI_VERSION CACHE_DIR}
GO=${GO:-go}
OUT=$CACHE/flannel-$VERSION
STAMP="$VERSION $CNI_VERSION"
BINS=(flanneld install-conf flannel)

# shellcheck source=build-cache.sh
source "$(dirname "$0")/build-cache.sh"

if complete "$OUT" "$STAMP" "${BINS[@]}"; then
	echo "flannel-build: $OUT is complete"
	exit 0
fi

work=$(mktemp -d /tmp/podwire-flannelbuild.XXXXXX)
trap 'rm -rf "$work"' EXIT
gover=$("$GO" env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')

echo "flannel-build: flanneld and install-conf $VERSION"
mkdir -p "$work/flannel/out"
printf 'module podwire.local/flannelbuild\n\ngo %s\n\nrequire github.com/flannel-io/flannel %s\n' "$gover" "$VERSION" >"$work/flannel/go.mod"
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
printf 'module podwire.local/flannelcnibuild\n\ngo %s\n\nrequire github.com/containernetworking/plugins %s\n' "$gover" "$CNI_VERSION" >"$work/cni/go.mod"
(cd "$work/cni" && time "$GO" build -trimpath -ldflags "-s -w" -o out/flannel github.com/containernetworking/plugins/plugins/meta/flannel)

mkdir -p "$OUT"
for b in flanneld install-conf; do mv -f "$work/flannel/out/$b" "$OUT/$b"; done
mv -f "$work/cni/out/flannel" "$OUT/flannel"
echo "$STAMP" >"$OUT/.stamp"
