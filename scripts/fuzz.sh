#!/usr/bin/env bash
# Runs every go-fuzz target for a bounded time (FUZZTIME, default 30s each).
# A crasher is written by `go test` under the package's testdata/fuzz/ and
# must be committed as a regression case.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-30s}
grep -rl --include='*_test.go' '^func Fuzz' pkg plugins 2>/dev/null | sort | while read -r f; do
	pkg=./$(dirname "$f")
	for fn in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do
		echo "fuzz $pkg $fn for $t"
		go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$t" "$pkg"
	done
done
