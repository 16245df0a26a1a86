#!/usr/bin/env bash
# make demo: a simulated Kubernetes node in network namespaces running the
# real chain (ptp + host-local, then podwire) through cnitool, the reference
# CNI client. It prints each CNI result, one PASS/FAIL line per claim, the
# live podwire ruleset of the node, and removes everything it made.
#
# Needs root, `make build tools` (the Makefile's demo target runs them) and
# iproute2. Touches nothing outside its own namespaces and /run/podwire-demo.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=$ROOT/bin/podwire
TOOLS=${PODWIRE_CNI_BIN:-$ROOT/.cache/cni-bin}
DEMO=/run/podwire-demo
TAG=pwdemo$$
NODE=$TAG-node
fails=0

say() { printf '\n== %s\n' "$*"; }
claim() { # claim "description" command...
	local what=$1; shift
	if "$@" >/dev/null 2>&1; then echo "PASS  $what"; else echo "FAIL  $what"; fails=$((fails + 1)); fi
}
refute() { # refute "description" command...: PASS when the command fails
	local what=$1; shift
	if "$@" >/dev/null 2>&1; then echo "FAIL  $what"; fails=$((fails + 1)); else echo "PASS  $what"; fi
}
innode() { ip netns exec "$NODE" "$@"; }

cleanup() {
	set +e
	for p in ordinary router; do
		[ -e /run/netns/$TAG-$p ] && cni del $p >/dev/null 2>&1
		ip netns del $TAG-$p 2>/dev/null
	done
	ip netns del "$NODE" 2>/dev/null
	rm -rf "$DEMO"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "make demo needs root (network namespaces)"; exit 1; }
for f in "$BIN" "$TOOLS/ptp" "$TOOLS/host-local" "$TOOLS/cnitool"; do
	[ -x "$f" ] || { echo "missing $f: run make build tools"; exit 1; }
done

mkdir -p "$DEMO/net.d" "$DEMO/bin" "$DEMO/cache"
cp "$BIN" "$TOOLS/ptp" "$TOOLS/host-local" "$DEMO/bin/"
cp cni-conf/20-ptp.conflist "$DEMO/net.d/"

# cni VERB POD [ANNOTATIONS-JSON [K8S-NAMESPACE]]: cnitool in the node netns,
# with the pod annotations as the runtime's capability argument.
cni() {
	local verb=$1 pod=$2 ann=${3:-null} kns=${4:-default}
	innode env NETCONFPATH="$DEMO/net.d" CNI_PATH="$DEMO/bin" CNI_IFNAME=eth0 \
		CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=$kns;K8S_POD_NAME=$pod;K8S_POD_UID=uid-$pod" \
		CAP_ARGS="{\"io.kubernetes.cri.pod-annotations\": $ann}" \
		"$TOOLS/cnitool" "$verb" podwire-demo "/run/netns/$TAG-$pod"
}

say "node: network namespace $NODE, forwarding on"
ip netns add "$NODE"
innode ip link set lo up
innode sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 net.ipv6.conf.default.accept_dad=0

say "ordinary pod: ADD through ptp + host-local, then podwire (cnitool)"
ip netns add "$TAG-ordinary"
cni add ordinary | tee "$DEMO/ordinary.json"

say "router pod in namespace nf-edge, annotated podwire.io/forwarding=true"
ip netns add "$TAG-router"
cni add router '{"podwire.io/forwarding": "true"}' nf-edge | tee "$DEMO/router.json"

say "claims"
claim "ordinary pod: CHECK passes" cni check ordinary
claim "ordinary pod reaches the node from its own address" \
	ip netns exec "$TAG-ordinary" ping -c1 -W2 10.199.0.1
claim "podwire recorded both attachments" test "$(ls "$DEMO/state"/*.json | wc -l)" = 2
refute "a forwarding pod in namespace default is refused" \
	bash -c "ip netns add $TAG-refused; trap 'ip netns del $TAG-refused' EXIT; $(declare -f cni innode); NODE=$NODE TAG=$TAG DEMO=$DEMO TOOLS=$TOOLS cni add refused '{\"podwire.io/forwarding\": \"true\"}' default"

if [ -x "$(command -v nft)" ]; then
	say "live podwire ruleset of the node"
	innode nft list ruleset | sed -n '/table .* podwire/,/^}/p'
fi

say "DEL both pods (twice: the runtime's second DEL has no netns)"
cni del ordinary && cni del ordinary
cni del router
claim "no podwire state left after DEL" test -z "$(ls "$DEMO/state"/*.json 2>/dev/null)"

echo
if [ "$fails" = 0 ]; then echo "demo: all claims PASS"; else echo "demo: $fails claim(s) FAIL"; exit 1; fi
