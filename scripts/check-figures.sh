#!/usr/bin/env bash
# check-figures.sh fails on benchmark figures in the comments of the
# product's Go code (plugins/, pkg/, cmd/, not tests): they go stale; they
# belong in docs/benchmarks.md and commit messages, and a comment says why
# the code is as it is. The rules on code itself (the process shape, netlink
# dumps) are forbidigo's, in .golangci.yml; forbidigo reads identifiers,
# not comments, so this one stays a grep.
#
# Usage: scripts/check-figures.sh [FILE.go...]   (default: every tracked
# non-test .go file under plugins/, pkg/ and cmd/)
set -euo pipefail
if [ $# -gt 0 ]; then
	files=()
	for f in "$@"; do files+=("$(realpath "$f")"); done
	cd "$(dirname "$0")/.."
else
	cd "$(dirname "$0")/.."
	mapfile -t files < <(git ls-files 'plugins/*.go' 'pkg/*.go' 'cmd/*.go' | grep -v '_test\.go$')
fi
[ ${#files[@]} -gt 0 ] || exit 0

# A figure (a time, a percentage, a ratio) next to a word of a measurement.
fig='[0-9] ?((ms|µs|us|ns|s|x)\b|%)' word='\b(cpu|wall|took|faster|slower|bench|rounds|per add|per del|profil)'
if hits=$(grep -nHiE "//.*($fig.*$word|$word.*$fig)" "${files[@]}"); then
	echo "check-figures: benchmark figures belong in docs/benchmarks.md, not in comments (say why the code is as it is):" >&2
	echo "$hits" | sed 's/^/  /' >&2
	exit 1
fi
