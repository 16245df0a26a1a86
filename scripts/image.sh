#!/usr/bin/env bash
# Builds podwire's image offline as an OCI archive, bin/podwire-image.tar,
# from the static binaries of `make build` (scripts/mkimage, with
# go-containerregistry; no base image, no daemon, no registry). Import it on
# a node with:  ctr -n k8s.io images import bin/podwire-image.tar
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-docker.io/podwire/podwire-agent:dev}
CGO_ENABLED=0 ${GO:-go} run ./scripts/mkimage -o bin/podwire-image.tar -name "$IMAGE" bin/podwire-agent bin/podwire
echo "bin/podwire-image.tar: $IMAGE"
