#!/usr/bin/env bash
# Prints podwire's version, the one string stamped into both binaries
# (pkg/buildinfo) and used as the image tag: `git describe --tags` of the
# nearest v* tag (v0.1.0, v0.1.0-12-g15c26ea), suffixed -dirty when tracked
# files differ from HEAD. While the repository has no such tag, BASE with the
# number of commits and the abbreviated hash: v0.1.0-12-g15c26ea[-dirty].
# Outside a git checkout: BASE-dev.
#
# Read-only on the repository: GIT_OPTIONAL_LOCKS=0 keeps `git status` from
# refreshing the index, so a build never holds index.lock while someone
# commits in the same tree (`git describe --dirty` may take it).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=v0.1.0
export GIT_OPTIONAL_LOCKS=0
if ! sha=$(git rev-parse --short=7 HEAD 2>/dev/null); then
	echo "$BASE-dev"
	exit 0
fi
if [ -n "$(git tag -l 'v[0-9]*')" ] && v=$(git describe --tags --match 'v[0-9]*' 2>/dev/null); then
	:
else
	v="$BASE-$(git rev-list --count HEAD)-g$sha"
fi
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	v="$v-dirty"
fi
echo "$v"
