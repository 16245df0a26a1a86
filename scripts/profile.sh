#!/usr/bin/env bash
# Profiles podwire run directly on the nodes of integration/bench's
# BenchmarkScaling, at each BENCH_LEVELS level: in its unmeasured round, every
# direct ADD and DEL of podwire runs under a wrapper (BENCH_WRAP: %d is the
# level, %o the op, "alone" steady or "alonefirst" right after podwire's tables
# were deleted, %v the verb). Root, after `make build tools`.
#
# Usage:
#   scripts/profile.sh strace          syscall summaries (strace -f -c) of one
#                                      steady ADD and DEL per level, as markdown
#   scripts/profile.sh summary DIR     the same from DIR, the strace -c files of
#                                      `make bench` (scripts/bench.sh)
#   scripts/profile.sh timeline DIR    strace -f -tt -T timelines, DIR/<level>-<op>-<verb>.strace
#   scripts/profile.sh perf DIR        perf record -g, DIR/<level>-<op>-<verb>.data
#   scripts/profile.sh faults DIR      perf record -e page-faults -c 1 -g, DIR/<level>-<op>-<verb>.data
#   scripts/profile.sh wrap 'CMD...'   any wrapper, e.g. 'ltrace -c -o /tmp/%d-%o-%v --'
# PODWIRE_BIN picks the binary (an unstripped `go build -trimpath ./plugins/podwire`
# gives perf its symbols). Then, e.g.:
#   perf report -i DIR/1000-alonefirst-ADD.data --children --sort symbol -g none --stdio
#   CNI_COMMAND=VERSION perf stat -r 30 -e task-clock bin/podwire </dev/null
#   GODEBUG=inittrace=1 bin/podwire version
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
export BENCH_BIN=$PWD/.cache/bench-bin
export PODWIRE_BIN=${PODWIRE_BIN:-$PWD/bin/podwire} PODWIRE_CNI_BIN=${PODWIRE_CNI_BIN:-$PWD/.cache/cni-bin}
mkdir -p "$BENCH_BIN"
dir=${2:-}
case "${1:-}" in
strace)
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
	BENCH_WRAP="strace -f -c -S calls -o $dir/%d-%o-%v --" ;;
timeline) BENCH_WRAP="strace -f -tt -T -o $dir/%d-%o-%v.strace --" ;;
perf) BENCH_WRAP="perf record -F 5000 -g -o $dir/%d-%o-%v.data --" ;;
faults) BENCH_WRAP="perf record -e page-faults -c 1 -g -o $dir/%d-%o-%v.data --" ;;
wrap) BENCH_WRAP=$2 dir= ;;
summary) ;;
*)
	sed -n '2,/^set -e/p' "$0" | sed '$d' >&2
	exit 2
	;;
esac
if [ "$1" != summary ]; then
	case "$1" in timeline | perf | faults) mkdir -p "${dir:?scripts/profile.sh $1 needs a DIR}" ;; esac
	export BENCH_WRAP
	CGO_ENABLED=0 $GO -C integration test -c -o "$BENCH_BIN/profile.test" ./bench
	"$BENCH_BIN/profile.test" -test.run '^$' -test.bench '^BenchmarkScaling$' -test.benchtime 1x -test.timeout 0 >&2
fi
if [ "$1" = strace ] || [ "$1" = summary ]; then
	echo
	echo '## Syscall profile of podwire (`strace -f -c`, one ADD and one DEL per level)'
	for f in $(ls "$dir" | grep -- '-alone-ADD$' | sort -n); do
		for verb in ADD DEL; do
			printf '\n### %s existing pods, %s\n\n```\n' "${f%%-*}" "$verb"
			# the header, the 14 most frequent calls, the total
			awk 'NR <= 2 || /^------/ || /total$/ || n++ < 14' "$dir/${f%-ADD}-$verb"
			echo '```'
		done
	done
fi
