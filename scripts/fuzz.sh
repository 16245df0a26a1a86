#!/usr/bin/env bash
# Runs every go-fuzz target for a bounded number of executions (FUZZTIME,
# go test's -fuzztime; default 100000x each). A crasher is written by
# `go test` under the package's testdata/fuzz/ and must be committed as a
# regression case.
#
# The budget is a count, not a duration: with a duration, Go before 1.27
# can fail a target that found nothing with a bare "context deadline
# exceeded" when -fuzztime expires (the coordinator compares the worker
# context's error before the deadline has reached it, internal/fuzz/fuzz.go
# `stop`: golang/go#75804, fixed in Go 1.27). A count has no deadline to race.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-100000x}
grep -rl --include='*_test.go' '^func Fuzz' pkg plugins 2>/dev/null | sort | while read -r f; do
	pkg=./$(dirname "$f")
	for fn in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do
		echo "fuzz $pkg $fn for $t"
		go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$t" "$pkg"
	done
done
