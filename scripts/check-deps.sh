#!/usr/bin/env bash
# check-deps.sh fails when a script, a test or the benchmark calls a program
# that no Debian package of scripts/deps.list provides (the packages
# scripts/install-deps.sh installs on a fresh machine), naming the program,
# where it is called and the line to add to scripts/deps.list. The programs are
# found mechanically (shell parsed with mvdan.cc/sh, Go with go/ast) and
# resolved with `command -v` and `dpkg -S`: see tools/checkdeps/main.go.
#
# Usage: scripts/check-deps.sh [FILE...]   (default: every tracked shell
# script, .ci/run and every tracked Go file)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if [ $# -gt 0 ]; then
	files=()
	for f in "$@"; do files+=("$(realpath "$f")"); done
else
	mapfile -t files < <(git ls-files '*.sh' '*.go' .ci/run | grep -v '^tools/checkdeps/testdata/' | sed "s|^|$ROOT/|")
fi
exec ${GO:-go} run -C "$ROOT/tools/checkdeps" . -deps "$ROOT/scripts/deps.list" "${files[@]}"
