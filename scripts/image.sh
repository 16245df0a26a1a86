#!/usr/bin/env bash
# Builds podwire's image offline as an OCI archive, bin/podwire-image.tar: a
# multi-arch image index (one image per platform of PLATFORMS), each image
# one layer holding the static binaries podwire-agent, podwire and
# kubectl-podwire (the chart's `helm test` runs it),
# cross-compiled with CGO_ENABLED=0 into bin/<os>_<arch>/ (MKIMAGE, the
# command of tools/image that `make mkimage` builds, with
# go-containerregistry; no base image, no daemon, no registry). mkimage
# attaches to the index a CycloneDX SBOM of every binary named below.
#
# Run by `make image`, which sets MKIMAGE, IMAGE (the reference recorded in the
# archive: REGISTRY/podwire-agent:VERSION), VERSION, COMMIT and LDFLAGS;
# OUT (default bin/podwire-image.tar) and BUILD_DIR (default bin) place
# another build beside it.
# Import the archive on a node with
#   ctr -n k8s.io images import bin/podwire-image.tar
# (it unpacks the node's platform), or push it with `make push`.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${IMAGE:?set by make image}" "${VERSION:?}" "${LDFLAGS:?}"
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64}
OUT=${OUT:-bin/podwire-image.tar}
BUILD_DIR=${BUILD_DIR:-bin}
GO=${GO:-go}
export CGO_ENABLED=0
# No VCS stamp: go stamps the commit and the tree's state into a build in
# a git clone but not in a linked worktree, so the same commit would give
# two digests; the commit is stamped by LDFLAGS (pkg/buildinfo) instead.
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
args=()
for p in $PLATFORMS; do
	os=${p%/*} arch=${p#*/}
	out=$BUILD_DIR/${os}_$arch
	GOOS=$os GOARCH=$arch $GO build -trimpath -ldflags "$LDFLAGS" -o "$out/podwire" ./plugins/podwire
	GOOS=$os GOARCH=$arch $GO build -trimpath -ldflags "$LDFLAGS" -o "$out/podwire-agent" ./cmd/podwire-agent
	GOOS=$os GOARCH=$arch $GO -C cmd/kubectl-podwire build -trimpath -ldflags "$LDFLAGS" -o "$PWD/$out/kubectl-podwire" .
	args+=(-platform "$p=$out")
done
"${MKIMAGE:?set by make image}" build -o "$OUT" -name "$IMAGE" \
	-version "$VERSION" -revision "${COMMIT:-}" "${args[@]}" podwire-agent podwire kubectl-podwire
