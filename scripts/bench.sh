#!/usr/bin/env bash
# Runs the testing.B benchmarks of integration/bench (podwire against the
# reference plugins and a do-nothing chained plugin) and writes
# docs/benchmarks.md from their output with integration/bench/report. Run as
# root by `make bench`, after `make build tools`. Only network namespaces of
# its own are touched; the host netns is not.
#
# Environment: BENCH (the -bench regexp, default every benchmark),
# BENCH_ROUNDS (rounds of each benchmark = pods per arm, default 30),
# BENCH_LEVELS, BENCH_NODE_PODS, BENCH_FOREIGN, BENCH_COMPARE (integration/bench/README.md
# says what they are), BENCH_OUT (default docs/benchmarks.md),
# BENCH_VM=0 to skip row G's VM run (scripts/vm-test.sh,
# BenchmarkVLANAttachment, BENCH_VM_ROUNDS rounds, default 20; about 2
# minutes under TCG), BENCH_STRACE=0 to skip the syscall profile
# (scripts/profile.sh summary).
# Quick look: BENCH_ROUNDS=3 BENCH_LEVELS=0,10 BENCH_FOREIGN=50,3,100 BENCH_VM=0 BENCH_STRACE=0 BENCH_OUT=...
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench: needs root (network namespaces, nftables)" >&2
	exit 1
fi
GO=${GO:-go}
export BENCH_BIN=$PWD/.cache/bench-bin
export PODWIRE_BIN=${PODWIRE_BIN:-$PWD/bin/podwire} PODWIRE_CNI_BIN=${PODWIRE_CNI_BIN:-$PWD/.cache/cni-bin}
mkdir -p "$BENCH_BIN"
# integration/ is a Go module of its own: go runs in it (-C).
CGO_ENABLED=0 $GO -C integration build -trimpath -ldflags '-s -w' -o "$BENCH_BIN/passthrough" ./bench/passthrough
CGO_ENABLED=0 $GO -C integration test -c -o "$BENCH_BIN/bench.test" ./bench
# BenchmarkAgent's agent process (BENCH_AGENT names another build).
CGO_ENABLED=0 $GO -C integration build -trimpath -o "$BENCH_BIN/agentproc" ./bench/agentproc
out=${BENCH_OUT:-docs/benchmarks.md}
raw=$BENCH_BIN/bench.txt
start=$(date +%s)

# Row G (a VLAN attachment) needs bridge VLAN filtering, which this kernel
# may lack: it then runs in the VM suite's VM, first, while nothing else runs.
if [ "${BENCH_VM:-1}" != 0 ]; then
	echo "bench: the VLAN attachment in the VM (${BENCH_VM_ROUNDS:-20} rounds)" >&2
	if ! PODWIRE_VM_BENCH=VLANAttachment PODWIRE_VM_BENCHTIME="${BENCH_VM_ROUNDS:-20}x" \
		scripts/vm-test.sh >"$BENCH_BIN/vm-bench.log" 2>&1; then
		echo "bench: the VM's VLAN benchmark failed; see $BENCH_BIN/vm-bench.log" >&2
	fi
fi

# The machine, as "key: value" lines before go test's own (goos, cpu).
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "nproc: $(nproc)"
	echo "memory: $(awk '/^MemTotal/ {print $2, $3}' /proc/meminfo)"
	echo "kernel: $(uname -r)"
	echo "go: $($GO env GOVERSION) (bench), $($GO version "$PODWIRE_BIN" | awk '{print $NF}') (bin/podwire)"
	echo "revision: $(git describe --always --dirty 2>/dev/null || echo unknown)"
	echo "dirty: $(git status --porcelain -- pkg plugins 2>/dev/null | wc -l)"
	echo "nft: $(nft --version 2>/dev/null || echo 'not found')"
	echo "rounds: ${BENCH_ROUNDS:-30}"
	echo "levels: ${BENCH_LEVELS:-0,100,1000}" | tr , ' '
	echo "nodepods: ${BENCH_NODE_PODS:-10,250,1000}" | tr , ' '
	# the VM's "PODWIRE-VLAN-BENCH rounds=20 ordinary_add_p50_ms=..." as vm-rounds: 20, ...
	if [ "${BENCH_VM:-1}" != 0 ]; then
		grep -o 'PODWIRE-VLAN-BENCH .*' "$BENCH_BIN/vm-bench.log" | tail -n 1 | tr ' ' '\n' | sed -n 's/^\(.*\)=/vm-\1: /p' || true
	fi
	echo "loadstart: $(cut -d' ' -f1-3 /proc/loadavg)"
	for b in "$PODWIRE_BIN" "$BENCH_BIN/passthrough" "$PODWIRE_CNI_BIN"/{ptp,host-local,tuning,portmap}; do
		stat -c %s "$b" | awk -v n="$(basename "$b")" '{printf "size-%s: %.2f MiB (%d bytes)\n", n, $1 / 1048576, $1}'
	done
} >"$raw"
# The syscall profile: podwire run directly under strace -c in
# BenchmarkScaling's unmeasured round (scripts/profile.sh).
strace_dir=$BENCH_BIN/strace
rm -rf "$strace_dir"
if [ "${BENCH_STRACE:-1}" != 0 ] && command -v strace >/dev/null; then
	mkdir -p "$strace_dir"
	export BENCH_WRAP="strace -f -c -S calls -o $strace_dir/%d-%o-%v --"
fi
"$BENCH_BIN/bench.test" -test.run '^$' -test.bench "${BENCH:-.}" -test.benchtime "${BENCH_ROUNDS:-30}x" \
	-test.timeout 0 | tee -a "$raw"
{
	echo "loadend: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "duration: $(($(date +%s) - start)) s"
	# The pod start-up figures of the last `make bench-k8s`
	# (integration/k8s/multinode TestPodStartup), "podstartup-*: value".
	if [ -f "$BENCH_BIN/pod-startup.txt" ]; then
		cat "$BENCH_BIN/pod-startup.txt"
	fi
	# The agent's memory under annotations of the same run
	# (TestAgentMemoryUnderAnnotations), "agentmemory-*: value".
	if [ -f "$BENCH_BIN/agent-memory.txt" ]; then
		cat "$BENCH_BIN/agent-memory.txt"
	fi
	# The last `make bench-scale` (integration/k8s/scale), "scale-*: value".
	if [ -f "$BENCH_BIN/scale.txt" ]; then
		cat "$BENCH_BIN/scale.txt"
	fi
} >>"$raw"
mkdir -p "$(dirname "$out")"
$GO -C integration run ./bench/report "$raw" >"$out"
if [ -d "$strace_dir" ]; then
	scripts/profile.sh summary "$strace_dir" >>"$out"
fi
echo "bench: wrote $out" >&2
