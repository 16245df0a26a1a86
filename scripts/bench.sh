#!/usr/bin/env bash
# Benchmarks podwire against the reference plugins and a do-nothing chained
# plugin, and writes docs/benchmarks.md (see integration/bench). Run as root
# by `make bench`, after `make build tools`. Only network namespaces of its own
# are touched; the host netns is not.
#
# Environment: BENCH_ROUNDS (pods per arm, default 30), BENCH_LEVELS (existing
# podwire pods of the scaling runs, default 0,100,1000), BENCH_FOREIGN (the
# other owner's ruleset of the foreign-ruleset node: services,endpoints per
# service,services without endpoints; default 5000,3,17500 = 20000 chains,
# 100000 rules, 50000 elements; 0,0,0 skips it), BENCH_STRACE=0 to skip the
# strace profile, BENCH_OUT (default docs/benchmarks.md), BENCH_VM=0 to skip
# the VLAN row's VM run (scripts/vm-test.sh, BenchmarkVLANAttachment,
# BENCH_VM_ROUNDS rounds, default 20; about 2 minutes under TCG).
# Quick look (CI time): BENCH_ROUNDS=3 BENCH_LEVELS=0,10 BENCH_FOREIGN=50,3,100 BENCH_STRACE=0
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench: needs root (network namespaces, nftables)" >&2
	exit 1
fi
GO=${GO:-go}
BENCH_BIN=.cache/bench-bin
mkdir -p "$BENCH_BIN"
CGO_ENABLED=0 $GO build -trimpath -ldflags '-s -w' -o "$BENCH_BIN/passthrough" ./integration/bench/passthrough
CGO_ENABLED=0 $GO build -o "$BENCH_BIN/bench" ./integration/bench

strace_flag=()
if [ "${BENCH_STRACE:-1}" != 0 ] && command -v strace >/dev/null; then
	strace_flag=(-strace)
fi
rev=$(git describe --always --dirty 2>/dev/null || echo unknown)
# What the measured binary holds: the tree may carry work not committed yet.
if [ -n "$(git ls-files pkg/nodetables 2>/dev/null)" ]; then
	nt="committed"
elif [ -d pkg/nodetables ]; then
	nt="present in the working tree, not committed yet"
else
	nt="absent"
fi
dirty=$(git status --porcelain -- pkg plugins 2>/dev/null | wc -l)

# Row G (a VLAN attachment) needs bridge VLAN filtering, which this kernel
# may lack: it then runs in the VM suite's VM, first, while nothing else runs.
vlan_vm=()
if [ "${BENCH_VM:-1}" != 0 ]; then
	echo "bench: the VLAN attachment in the VM (${BENCH_VM_ROUNDS:-20} rounds)" >&2
	if ! PODWIRE_BIN=$PWD/bin/podwire PODWIRE_VM_BENCH=VLANAttachment PODWIRE_VM_BENCHTIME="${BENCH_VM_ROUNDS:-20}x" \
		scripts/vm-test.sh >"$BENCH_BIN/vm-bench.log" 2>&1; then
		echo "bench: the VM's VLAN benchmark failed; see $BENCH_BIN/vm-bench.log" >&2
	fi
	vlan_vm=(-vlan-vm "$BENCH_BIN/vm-bench.log")
fi

exec "$BENCH_BIN/bench" \
	-podwire bin/podwire \
	-cni-bin .cache/cni-bin \
	-bench-bin "$BENCH_BIN" \
	-n "${BENCH_ROUNDS:-30}" \
	-levels "${BENCH_LEVELS:-0,100,1000}" \
	-foreign "${BENCH_FOREIGN:-5000,3,17500}" \
	-out "${BENCH_OUT:-docs/benchmarks.md}" \
	-rev "$rev" \
	-note "node-table work (pkg/nodetables) at build time: $nt; files changed or new under pkg/ and plugins/ vs HEAD: $dirty" \
	"${vlan_vm[@]}" "${strace_flag[@]}"
