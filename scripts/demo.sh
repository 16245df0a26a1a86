#!/usr/bin/env bash
# make demo: a simulated Kubernetes node in network namespaces running the
# real chain (ptp + host-local, then podwire) through cnitool, the reference
# CNI client. It proves podwire's claims with packets, one PASS/FAIL line per
# claim, prints the live podwire ruleset of the node, and removes everything
# it made (namespaces, links, processes, files) on any exit.
#
#   client ns ──cl0/eth0── router pod (nf-edge, forwarding)  ─┐ ptp veths
#                          ordinary pod (default)            ─┤
#                                                        node ns ──uplink0── wan ns (bridge sw0)
#                                                                             ├── server ns 192.0.2.100, 2001:db8:1::100
#                                                                             └── lb ns fe80::1234:5678:9abc (IPv6 router
#                                                                                 and load-balancer prober), 192.0.2.1
#
# Needs root, `make build tools` (the Makefile's demo target runs them),
# iproute2, ping, socat and nft (scripts/install-deps.sh). Touches nothing
# outside its own namespaces and a fresh work dir under /run; cnitool's
# result cache is bind-mounted into the work dir as well.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=$ROOT/bin/podwire
TOOLS=${PODWIRE_CNI_BIN:-$ROOT/.cache/cni-bin}
TAG=pwdemo$$
NODE=$TAG-node WAN=$TAG-wan SERVER=$TAG-server LB=$TAG-lb CLIENT=$TAG-client
ORD=$TAG-ordinary ROUTER=$TAG-router
WORK= CONF=
PIDS=()
RESULTS=()
fails=0

say() { printf '\n== %s\n' "$*"; }
note() { printf '   %s\n' "$*"; }
pass() { echo "PASS  $1"; RESULTS+=("PASS  $1"); }
fail() { echo "FAIL  $1"; RESULTS+=("FAIL  $1"); fails=$((fails + 1)); }
verdict() { # verdict "claim" exit-status
	if [ "$2" = 0 ]; then pass "$1"; else fail "$1"; fi
}
in_() { local n=$1; shift; ip netns exec "$n" "$@"; }

cleanup() {
	local rc=$?
	set +e
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
	for n in $(ip netns list | awk -v t="$TAG-" 'index($1, t) == 1 {print $1}'); do
		# anything still running in our namespaces was started by us
		for p in $(ip netns pids "$n" 2>/dev/null); do kill "$p" 2>/dev/null; done
		ip netns del "$n"
	done
	[ -n "$WORK" ] && rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" = 0 ] || { echo "make demo needs root (network namespaces)"; exit 1; }
for f in "$BIN" "$TOOLS/ptp" "$TOOLS/host-local" "$TOOLS/cnitool"; do
	[ -x "$f" ] || { echo "missing $f: run make build tools"; exit 1; }
done
for t in ip ping socat nft unshare timeout ss; do
	command -v $t >/dev/null || { echo "missing $t: run scripts/install-deps.sh"; exit 1; }
done

WORK=$(mktemp -d /run/podwire-demo.XXXXXX)
mkdir -p "$WORK/net.d" "$WORK/bin" "$WORK/varlib"
cp "$BIN" "$TOOLS/ptp" "$TOOLS/host-local" "$WORK/bin/"
CONF=$WORK/net.d/30-demo.conflist
sed "s#/run/podwire-demo#$WORK#g" cni-conf/30-demo.conflist >"$CONF"

# cni VERB POD NETNS [ANNOTATIONS-JSON [K8S-NAMESPACE]]: cnitool in the node
# netns, with the pod annotations as the runtime's capability argument. A
# private mount namespace puts cnitool's /var/lib/cni cache into $WORK.
cni() {
	local verb=$1 pod=$2 netns=$3 ann=${4:-null} kns=${5:-default}
	in_ "$NODE" unshare -m sh -c 'mount --bind "$1" /var/lib && shift && exec "$@"' sh "$WORK/varlib" \
		env NETCONFPATH="$WORK/net.d" CNI_PATH="$WORK/bin" CNI_IFNAME=eth0 \
		CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=$kns;K8S_POD_NAME=$pod;K8S_POD_UID=uid-$pod" \
		CAP_ARGS="{\"io.kubernetes.cri.pod-annotations\": $ann}" \
		"$TOOLS/cnitool" "$verb" podwire-demo "/run/netns/$netns"
}

# mkns NAME: a netns with lo up and no DAD (demo speed only).
mkns() {
	ip netns add "$1"
	in_ "$1" sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0
	ip -n "$1" link set lo up
}

# delns NAME: stop what we run in a netns, then delete it.
delns() {
	local p
	for p in $(ip netns pids "$1" 2>/dev/null); do kill "$p" 2>/dev/null; done
	ip netns del "$1"
}

# serve NETNS ADDR: a TCP echo of the peer's address on ADDR port 8080.
serve() {
	local ns=$1 addr=$2 spec
	case $addr in
	*:*) spec="TCP6-LISTEN:8080,bind=[$addr],reuseaddr,fork" ;;
	*) spec="TCP4-LISTEN:8080,bind=$addr,reuseaddr,fork" ;;
	esac
	# ip netns exec execs socat: $! is the listener itself.
	ip netns exec "$ns" socat "$spec" SYSTEM:'echo $SOCAT_PEERADDR' </dev/null >/dev/null 2>&1 &
	PIDS+=($!)
	for _ in $(seq 50); do
		ip netns exec "$ns" ss -Htln "sport = :8080" | grep -qF "$addr" && return 0
		sleep 0.1
	done
	echo "listener $addr in $ns did not come up"
	return 1
}

# peer NETNS ADDR: connect to ADDR:8080 and print the peer address the
# server saw (empty when the connection fails).
peer() {
	local ns=$1 addr=$2 dst
	case $addr in *:*) dst="TCP6:[$addr]:8080" ;; *) dst="TCP4:$addr:8080" ;; esac
	canon "$(in_ "$ns" timeout 15 socat -u "$dst,connect-timeout=5" STDOUT 2>/dev/null | tr -d '[]\r')"
}

# canon ADDR: an IPv6 address in its RFC 5952 text form (socat prints all
# eight groups in full); anything else unchanged.
canon() {
	local a=$1 n run t
	case $a in *:*) ;; *) echo "$a"; return ;; esac
	a=$(sed -E 's/(^|:)0+([0-9a-f])/\1\2/g' <<<"${a,,}")
	for n in 8 7 6 5 4 3 2; do
		run=$(printf '0:%.0s' $(seq $n))
		run=:$run
		[[ ":$a:" == *"$run"* ]] || continue
		t=":$a:"
		t=${t/"$run"/::}
		[[ $t == ::* ]] || t=${t#:}
		[[ $t == *:: ]] || t=${t%:}
		echo "$t"
		return
	done
	echo "$a"
}

addr_of() { ip -n "$1" -o "$2" addr show dev eth0 scope global | awk '{sub("/.*", "", $4); print $4; exit}'; }
hostveth() { ip -n "$NODE" -o route get "$1" | sed -n 's/.* dev \([^ ]*\).*/\1/p'; }
drops() { # packets the source check dropped: the sum of the checked set's per-pod counters
	in_ "$NODE" nft list set inet podwire checked 2>/dev/null |
		grep -o 'counter packets [0-9]*' | awk '{s += $3} END {print s + 0}'
}

say "node $NODE: forwarding on, uplink0 on a switch with a server and the load balancer"
for n in "$NODE" "$WAN" "$SERVER" "$LB"; do mkns "$n"; done
in_ "$NODE" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 \
	net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
ip -n "$WAN" link add sw0 type bridge
ip -n "$WAN" link set sw0 up
ip -n "$NODE" link add uplink0 type veth peer name p-node netns "$WAN"
ip -n "$SERVER" link add eth0 type veth peer name p-server netns "$WAN"
ip -n "$LB" link add eth0 type veth peer name p-lb netns "$WAN"
for p in p-node p-server p-lb; do ip -n "$WAN" link set "$p" master sw0 up; done
# Node: 192.0.2.2 and 2001:db8:1::2 on the uplink, plus the egress IPs
# (the IPv6 one deprecated, so that only podwire's SNAT uses it).
ip -n "$NODE" addr add 192.0.2.2/24 dev uplink0
ip -n "$NODE" addr add 2001:db8:1::2/64 dev uplink0 nodad
ip -n "$NODE" addr add fe80::2/64 dev uplink0 nodad
ip -n "$NODE" addr add 203.0.113.10/32 dev uplink0
ip -n "$NODE" addr add 2001:db8:e::10/128 dev uplink0 nodad preferred_lft 0
ip -n "$NODE" link set uplink0 up
ip -n "$NODE" route add default via 192.0.2.1 dev uplink0
ip -n "$NODE" -6 route add default via fe80::1234:5678:9abc dev uplink0
# Load balancer / IPv6 router: only the Azure link-local address (no
# generated one), so its probes leave from fe80::1234:5678:9abc.
ip -n "$LB" link set eth0 addrgenmode none
ip -n "$LB" addr add fe80::1234:5678:9abc/64 dev eth0 nodad
ip -n "$LB" addr add 192.0.2.1/24 dev eth0
ip -n "$LB" link set eth0 up
ip -n "$LB" -6 route add fd00:199::/64 via fe80::2 dev eth0
# External server, with routes back to the egress IPs and the client network.
ip -n "$SERVER" addr add 192.0.2.100/24 dev eth0
ip -n "$SERVER" addr add 2001:db8:1::100/64 dev eth0 nodad
ip -n "$SERVER" link set eth0 up
for r in 203.0.113.10/32 198.51.100.0/24; do ip -n "$SERVER" route add "$r" via 192.0.2.2; done
for r in 2001:db8:e::10/128 2001:db8:100::/64; do ip -n "$SERVER" -6 route add "$r" via 2001:db8:1::2; done
note "conflist $CONF (ptp + host-local, podwire: probeSNAT azure, egress 203.0.113.10 2001:db8:e::10, claimScope node: one node, no agent)"

say "ordinary pod default/ordinary: ADD through ptp + host-local, then podwire (cnitool)"
mkns "$ORD"
cni add ordinary "$ORD" >"$WORK/ordinary.json"
O4=$(addr_of "$ORD" -4) O6=$(addr_of "$ORD" -6) OVETH=$(hostveth "$O4")
note "eth0 $O4 $O6, host side $OVETH"

say "forwarding pod nf-edge/router: podwire.io/forwarding=true, podwire.io/routes for the client network"
mkns "$ROUTER"
note "before ADD: net.ipv4.ip_forward=$(in_ "$ROUTER" sysctl -n net.ipv4.ip_forward) in the router pod (the demo never sets it)"
cni add router "$ROUTER" '{"podwire.io/forwarding": "true", "podwire.io/routes": "198.51.100.0/24,2001:db8:100::/64"}' nf-edge >"$WORK/router.json"
R4=$(addr_of "$ROUTER" -4) R6=$(addr_of "$ROUTER" -6)
note "eth0 $R4 $R6; after ADD: net.ipv4.ip_forward=$(in_ "$ROUTER" sysctl -n net.ipv4.ip_forward)" \
	"net.ipv6.conf.all.forwarding=$(in_ "$ROUTER" sysctl -n net.ipv6.conf.all.forwarding)"
note "node routes: $(ip -n "$NODE" -o route show 198.51.100.0/24) | $(ip -n "$NODE" -o -6 route show 2001:db8:100::/64)"
# Client network behind the router pod: 198.51.100.0/24, 2001:db8:100::/64.
mkns "$CLIENT"
ip -n "$ROUTER" link add cl0 type veth peer name eth0 netns "$CLIENT"
ip -n "$ROUTER" addr add 198.51.100.1/24 dev cl0
ip -n "$ROUTER" addr add 2001:db8:100::1/64 dev cl0 nodad
ip -n "$ROUTER" link set cl0 up
ip -n "$CLIENT" addr add 198.51.100.10/24 dev eth0
ip -n "$CLIENT" addr add 2001:db8:100::10/64 dev eth0 nodad
ip -n "$CLIENT" link set eth0 up
ip -n "$CLIENT" route add default via 198.51.100.1
ip -n "$CLIENT" -6 route add default via 2001:db8:100::1

serve "$SERVER" 192.0.2.100
serve "$SERVER" 2001:db8:1::100
serve "$ORD" "$O6"
serve "$CLIENT" 198.51.100.10
serve "$CLIENT" 2001:db8:100::10

say "claims"
set +e # a claim that fails is reported, not fatal
st=0; cni check ordinary "$ORD" >/dev/null 2>&1 || st=1
cni check router "$ROUTER" >/dev/null 2>&1 || st=1
verdict "CHECK passes for both pods" $st

# Spoof: the ordinary pod also holds 10.200.0.5 and the node routes it back
# to the pod, so only the source check stands between it and an answer.
in_ "$ORD" ip addr add 10.200.0.5/32 dev eth0
ip -n "$NODE" route add 10.200.0.5/32 via "$O4" dev "$OVETH"
before=$(drops)
own=$(in_ "$ORD" ping -c3 -i0.2 -W1 -I "$O4" 10.199.0.1 2>/dev/null | awk '/received/ {print $4}')
spoof=$(in_ "$ORD" ping -c3 -i0.2 -W1 -I 10.200.0.5 10.199.0.1 2>/dev/null | awk '/received/ {print $4}')
after=$(drops)
note "ping node from own $O4: ${own:-0}/3 answered; from spoofed 10.200.0.5: ${spoof:-0}/3 answered," \
	"source-check drop counter $before -> $after"
[ "${own:-0}" = 3 ] && [ "${spoof:-0}" = 0 ] && [ $((after - before)) -ge 3 ]
verdict "spoof dropped: ordinary pod's spoofed source dropped at the node, its own address passes" $?

ok=0
for fam in 4 6; do
	if [ $fam = 4 ]; then src=198.51.100.10 dst=192.0.2.100; else src=2001:db8:100::10 dst=2001:db8:1::100; fi
	got=$(peer "$CLIENT" "$dst")
	note "client $src -> server $dst via the router pod: server saw ${got:-nothing}"
	[ "$got" = "$src" ] || ok=1
	# and the other way: the server opens a connection to the client
	# (return path: the node's podwire.io/routes route to the router pod)
	got=$(peer "$SERVER" "$src")
	note "server $dst -> client $src: client saw ${got:-nothing}"
	[ "$got" = "$dst" ] || ok=1
done
verdict "forwarding carried: client behind the forwarding pod and the server reach each other with their own addresses" $ok

got=$(peer "$LB" "$O6")
note "TCP from lb fe80::1234:5678:9abc -> pod [$O6]:8080: pod saw ${got:-nothing}"
[ "$got" = 2603:1062:0:1:fe80:1234:5678:9abc ]
verdict "probe rewritten: LB probe completes, the pod sees 2603:1062:0:1:fe80:1234:5678:9abc" $?

ok=0
for pair in 192.0.2.100=203.0.113.10 2001:db8:1::100=2001:db8:e::10; do
	dst=${pair%=*} want=${pair#*=}
	got=$(peer "$ORD" "$dst")
	note "ordinary pod -> server $dst: server saw ${got:-nothing} (egress IP $want)"
	[ "$got" = "$want" ] || ok=1
done
verdict "egress SNATed: ordinary pod's connections leave from the node's egress IPs" $ok

mkns "$TAG-refused"
if out=$(cni add refused "$TAG-refused" '{"podwire.io/forwarding": "true"}' default 2>&1); then st=1; else st=0; fi
note "cnitool: $(grep -m1 -i 'error' <<<"$out")"
cni del refused "$TAG-refused" >/dev/null 2>&1 || true # as a runtime would: ptp releases its part
delns "$TAG-refused"
recs=$(ls "$WORK/state"/*.json 2>/dev/null | wc -l)
note "podwire records after the refusal: $recs (the two pods only)"
[ $st = 0 ] && [[ $out == *forwarding.namespaces* ]] && [ "$recs" = 2 ]
verdict "refused: a forwarding pod in namespace default fails ADD naming the gate, nothing recorded" $?

in_ "$NODE" "$BIN" status --conflist "$CONF" >"$WORK/status.txt" 2>&1 || true
sed -n '/^tables:/,/^$/p; /^attachments/,/^$/p; /^warnings/,$p' "$WORK/status.txt" | grep -v '^$' | sed 's/^/   /'
grep -q 'default/ordinary' "$WORK/status.txt" && grep -q 'nf-edge/router' "$WORK/status.txt"
verdict "podwire status lists both pods" $?

if ip netns add "$TAG-vlanprobe" && ip -n "$TAG-vlanprobe" link add br0 type bridge vlan_filtering 1 2>/dev/null; then
	ip netns del "$TAG-vlanprobe"
	mkns "$TAG-vlan"
	if cni add vlan "$TAG-vlan" '{"podwire.io/vlan": "100", "podwire.io/vlan-ips": "172.16.100.10/24"}' >"$WORK/vlan.json" 2>&1 &&
		ip -n "$TAG-vlan" -o addr show dev net1 | grep -q 172.16.100.10 &&
		ip -n "$NODE" link show podwire0 >/dev/null 2>&1; then
		note "$(in_ "$NODE" bridge vlan show 2>/dev/null | tr -s ' \n' ' ')"
		st=0
	else
		sed 's/^/   /' "$WORK/vlan.json"
		st=1
	fi
	cni del vlan "$TAG-vlan" >/dev/null 2>&1 || st=1
	delns "$TAG-vlan"
	verdict "VLAN: a pod annotated podwire.io/vlan=100 gets net1 on an access port of podwire0" $st
else
	ip netns del "$TAG-vlanprobe" 2>/dev/null || true
	echo "SKIP  VLAN: this kernel has no bridge VLAN filtering (creating a vlan_filtering bridge failed); make test-vm covers it"
fi

say "live podwire ruleset of the node (nft list ruleset, podwire* tables)"
in_ "$NODE" nft list ruleset | awk '/^table / {p = ($3 ~ /^podwire/)} p'

say "DEL both pods twice (the runtime's second DEL has no netns and no cached result)"
st=0
cni del ordinary "$ORD" || st=1
cni del router "$ROUTER" || st=1
delns "$CLIENT"
delns "$ORD"
delns "$ROUTER"
cni del ordinary "$ORD" || st=1
cni del router "$ROUTER" || st=1
left=$(
	ls "$WORK/state"/*.json 2>/dev/null
	find "$WORK/ipam" -type f ! -name lock ! -name 'last_reserved_ip*' 2>/dev/null
	find "$WORK/varlib" -type f 2>/dev/null
	# per-pod set elements carry a comment naming the pod (namespace/name)
	in_ "$NODE" nft list ruleset | awk '/^table / {p = ($3 ~ /^podwire/)} p' | grep -E 'comment "[^ "]+/[^ "]+"'
	ip -n "$NODE" -o route show 198.51.100.0/24
	ip -n "$NODE" -o -6 route show 2001:db8:100::/64
	ip -n "$NODE" -o route show root 10.199.0.0/24
	ip -n "$NODE" -o link show | awk -F': ' '$2 !~ /^(lo|uplink0@)/ {print $2}'
)
[ -n "$left" ] && { st=1; echo "$left" | sed 's/^/   left: /'; }
verdict "DEL twice leaves no state (records, IPAM, cache, set elements, routes, links)" $st

say "summary"
printf '%s\n' "${RESULTS[@]}"
if [ "$fails" = 0 ]; then echo "demo: all claims PASS"; else echo "demo: $fails claim(s) FAIL"; exit 1; fi
