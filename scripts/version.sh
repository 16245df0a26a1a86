#!/usr/bin/env bash
# Prints podwire's version, the one string stamped into both binaries
# (pkg/buildinfo) and used as the image tag: `git describe --tags` of the
# nearest v* tag (v0.1.0, v0.1.0-12-g15c26ea), suffixed -dirty when tracked
# files differ from HEAD. While the repository has no such tag, BASE with the
# number of commits and the abbreviated hash: v0.1.0-12-g15c26ea[-dirty].
# Outside a git checkout: BASE-dev.
#
# Usage: scripts/version.sh [REV]: REV (a commit) names another commit's
# version, as that commit's own build would have printed it from a clean
# tree (no -dirty): the upgrade test's earlier release
# (scripts/previous-build.sh).
#
# Read-only on the repository: GIT_OPTIONAL_LOCKS=0 keeps `git status` from
# refreshing the index, so a build never holds index.lock while someone
# commits in the same tree (`git describe --dirty` may take it).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=v0.1.0
export GIT_OPTIONAL_LOCKS=0
REV=${1:-HEAD}
if ! sha=$(git rev-parse --short=7 "$REV^{commit}" 2>/dev/null); then
	if [ "$REV" != HEAD ]; then
		echo "version.sh: no commit $REV in this repository" >&2
		exit 1
	fi
	echo "$BASE-dev"
	exit 0
fi
if [ -n "$(git tag -l 'v[0-9]*')" ] && v=$(git describe --tags --match 'v[0-9]*' "$REV" 2>/dev/null); then
	:
else
	v="$BASE-$(git rev-list --count "$REV")-g$sha"
fi
if [ "$REV" = HEAD ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	v="$v-dirty"
fi
echo "$v"
