#!/usr/bin/env bash
# check-process-shape.sh enforces the plugin's process shape (HACKING.md,
# "Threads and netns"; the A/B figure that chose it is in docs/benchmarks.md,
# "Process shape") in the product's Go code (plugins/, pkg/, cmd/, not tests):
#
#  1. A thread enters another netns only inside ns.Do / ns.WithNetNSPath
#     (containernetworking/plugins/pkg/ns), which runs the work on a goroutine
#     locked to a thread of its own and lets that thread die if it cannot
#     switch back. The main goroutine is not locked, so a bare setns would
#     move a thread that other work then runs on: no Setns, no Unshare, no
#     netns.Set, no NetNS.Set(), no runtime.LockOSThread.
#  2. One place owns GOMAXPROCS: plugins/podwire/internal/oneproc. Reading
#     it (runtime.GOMAXPROCS(0)) is fine anywhere.
#  3. No benchmark figures in comments: they go stale; they belong in
#     docs/benchmarks.md and commit messages.
#
# Usage: scripts/check-process-shape.sh [FILE.go...]   (default: every
# tracked non-test .go file under plugins/, pkg/ and cmd/)
set -euo pipefail
shopt -s lastpipe # fail sets status in this shell
if [ $# -gt 0 ]; then
	files=()
	for f in "$@"; do files+=("$(realpath "$f")"); done
	cd "$(dirname "$0")/.."
else
	cd "$(dirname "$0")/.."
	mapfile -t files < <(git ls-files 'plugins/*.go' 'pkg/*.go' 'cmd/*.go' | grep -v '_test\.go$')
fi
[ ${#files[@]} -gt 0 ] || exit 0

status=0
fail() { # fail MESSAGE: grep's hits on stdin, if any, fail the check
	local hits
	hits=$(cat)
	[ -n "$hits" ] || return 0
	echo "check-process-shape: $1:" >&2
	echo "$hits" | sed 's/^/  /' >&2
	status=1
}

grep -nHE '\b(unix|syscall)\.(Setns|Unshare)\(|\bnetns\.(Set|SetNs)\(|\.Set\(\)|runtime\.(Un)?LockOSThread\(' "${files[@]}" |
	grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' |
	fail "switch a thread's netns only inside ns.Do or ns.WithNetNSPath (the main goroutine is not locked to its thread)" || true

grep -nHE 'runtime\.(GOMAXPROCS\([^0)]|SetDefaultGOMAXPROCS\()' "${files[@]}" |
	grep -vE '^([^:]*/)?plugins/podwire/internal/oneproc/' |
	fail "GOMAXPROCS is set only by plugins/podwire/internal/oneproc (call oneproc.Widen)" || true

# A figure (a time, a percentage, a ratio) next to a word of a measurement.
fig='[0-9] ?((ms|µs|us|ns|s|x)\b|%)' word='\b(cpu|wall|took|faster|slower|bench|rounds|per add|per del|profil)'
grep -nHiE "//.*($fig.*$word|$word.*$fig)" "${files[@]}" |
	fail "benchmark figures belong in docs/benchmarks.md, not in comments (say why the code is as it is)" || true
exit $status
