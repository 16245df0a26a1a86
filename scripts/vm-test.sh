#!/usr/bin/env bash
# vm-test.sh runs the VM suite (integration/vm) under Debian's stock kernel in QEMU.
#
# Why: the development kernel has no bridge VLAN filtering, no 8021q and no
# loadable modules, so the VLAN tests can only skip there. Debian's
# linux-image-amd64 has all of it as modules. We boot it under QEMU (TCG by
# default, no KVM needed) with a busybox initramfs that holds one static test
# binary, the CNI plugins under test, iproute2 for diagnostics and the modules.
# /init runs the tests and prints "PODWIRE-VM-EXIT=<status>" on the serial
# console; this script exits with that status, or fails loudly when the VM did
# not boot or did not finish in time.
#
# Environment:
#   PODWIRE_VM_RUN      -test.run regexp (default: all tests)
#   PODWIRE_VM_BENCH    -test.bench regexp: run these benchmarks and no test
#                       (make bench); PODWIRE_VM_BENCHTIME is -test.benchtime
#                       (default 20x)
#   PODWIRE_VM_TIMEOUT  seconds before the VM is killed (default 1200)
#   PODWIRE_VM_MEM      guest RAM in MiB (default 1024)
#   PODWIRE_VM_SMP      guest CPUs (default 2; the host has 2 cores)
#   PODWIRE_VM_ACCEL    qemu accelerator (default tcg)
#   PODWIRE_VM_KERNEL   kernel version under /lib/modules (default: newest *-amd64)
#   PODWIRE_BIN         the podwire binary to test (set by make; default: build it)
#   PODWIRE_VM_PLUGIN   0 to leave podwire out (harness-only runs)
#   PODWIRE_VM_SUITE    vm (default): integration/vm, libcni in the VM's own
#                       namespaces; k8s: integration/k8s/vlan, a two-node
#                       Kubernetes cluster in the VM. The k8s suite reads the
#                       binaries of make test-k8s (PODWIRE_K8S_BIN,
#                       PODWIRE_ETCD, PODWIRE_CONTAINERD_DIR, PODWIRE_RUNC,
#                       PODWIRE_CNI_BIN, PODWIRE_HELM) from the host's
#                       .cache, shared read-only into the VM over virtio-9p:
#                       they are too large for the initramfs. podwire's
#                       image (PODWIRE_IMAGE, PODWIRE_IMAGE_REF: make image),
#                       its chart and the push tool go into the initramfs.
#                       Its control plane runs on the host
#                       (integration/k8s/cluster/vmcontrolplane), at native
#                       speed, in a network namespace of its own whose tap
#                       device the VM bridges into its nodes' switch.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/integration/vm/build
ROOTFS=$BUILD/rootfs
SUITE=${PODWIRE_VM_SUITE:-vm}
RUN=${PODWIRE_VM_RUN:-}
BENCH=${PODWIRE_VM_BENCH:-}
BENCHTIME=${PODWIRE_VM_BENCHTIME:-20x}
TIMEOUT=${PODWIRE_VM_TIMEOUT:-1200}
MEM=${PODWIRE_VM_MEM:-1024}
SMP=${PODWIRE_VM_SMP:-2}
ACCEL=${PODWIRE_VM_ACCEL:-tcg}
CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.9.1}
GO=${GO:-go}

# Modules the suite needs; their dependencies are resolved from modules.dep.
# crc32c_generic first: libcrc32c asks the crypto API for "crc32c" at load time
# and there is no modprobe helper to load it on demand.
MODULES="crc32c_generic bridge 8021q veth dummy nf_tables nft_meta_bridge
nft_reject_bridge nft_chain_nat nft_nat nft_masq nft_ct nf_conntrack_netlink"
# Modules copied to /lib/modules but not loaded at boot: the test that needs
# one loads it (finit_module) and unloads it again, so that the rest of the
# suite runs without it. Their dependencies must be in MODULES.
ONDEMAND_MODULES="br_netfilter"
# The k8s suite's: the 9p share of .cache, overlayfs for containerd's
# snapshots, and macvlan for keepalived's virtual-MAC interface
# (use_vmac).
# virtio_net for the NIC that reaches the control plane on the host.
K8S_MODULES="virtio_pci 9pnet_virtio 9p overlay macvlan virtio_net"
# K8S_ENV are the variables of make test-k8s the k8s suite reads: paths
# under the host's .cache, seen in the VM under /cache.
K8S_ENV="PODWIRE_K8S_BIN PODWIRE_ETCD PODWIRE_CONTAINERD_DIR PODWIRE_RUNC PODWIRE_CNI_BIN PODWIRE_HELM"
CACHE=$ROOT/.cache

log() { echo "vm-test: $*" >&2; }
die() { log "ERROR: $*"; exit 2; }

ensure_packages() {
	local missing=()
	command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
	[ -x /bin/busybox ] && /bin/busybox --list >"$BUILD/busybox.list" && grep -qx ash "$BUILD/busybox.list" ||
		missing+=(busybox-static)
	ls /boot/vmlinuz-*-amd64 >/dev/null 2>&1 || missing+=(linux-image-amd64)
	command -v bridge >/dev/null || missing+=(iproute2)
	command -v cpio >/dev/null || missing+=(cpio)
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
	fi
	file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' ||
		ldd /bin/busybox 2>&1 | grep -q 'not a dynamic' ||
		die "/bin/busybox is not static; install busybox-static"
}

pick_kernel() {
	if [ -n "${PODWIRE_VM_KERNEL:-}" ]; then
		KVER=$PODWIRE_VM_KERNEL
	else
		KVER=$(ls /lib/modules | grep -- '-amd64$' | sort -V | tail -1 || true)
	fi
	[ -n "$KVER" ] || die "no Debian *-amd64 kernel modules under /lib/modules"
	KERNEL=/boot/vmlinuz-$KVER
	MODDIR=/lib/modules/$KVER
	[ -r "$KERNEL" ] || die "kernel image $KERNEL missing"
	[ -r "$MODDIR/modules.dep" ] || die "$MODDIR/modules.dep missing"
}

# module_path NAME prints the modules.dep path of NAME (dashes and underscores are the same).
module_path() {
	local n=${1//-/_}
	awk -F: -v n="$n" '{ p=$1; b=p; sub(/.*\//, "", b); sub(/\.ko(\.(xz|zst|gz))?$/, "", b); gsub(/-/, "_", b); if (b == n) { print p; exit } }' "$MODDIR/modules.dep"
}

# add_module PATH appends PATH after its dependencies (modules.dep lists them
# so that the last one must be loaded first) to LOAD_ORDER, once.
declare -A SEEN=()
LOAD_ORDER=()
add_module() {
	local p=$1 deps d i
	[ -n "${SEEN[$p]:-}" ] && return 0
	SEEN[$p]=1
	deps=$(awk -F': *' -v p="$p" '$1 == p { print $2; exit }' "$MODDIR/modules.dep")
	read -r -a d <<<"$deps"
	for ((i = ${#d[@]} - 1; i >= 0; i--)); do add_module "${d[i]}"; done
	LOAD_ORDER+=("$p")
}

copy_module() {
	local p=$1 out=$ROOTFS/lib/modules/$(basename "${1%%.ko*}").ko
	case $p in
	*.ko) cp "$MODDIR/$p" "$out" ;;
	*.ko.xz) xz -dc "$MODDIR/$p" >"$out" ;;
	*.ko.zst) zstd -qdc "$MODDIR/$p" >"$out" ;;
	*.ko.gz) gzip -dc "$MODDIR/$p" >"$out" ;;
	*) die "unknown module format $p" ;;
	esac
}

# copy_dynamic BIN copies BIN and the shared objects ldd names, with the loader.
copy_dynamic() {
	local bin=$1 lib
	install -D -m 0755 "$bin" "$ROOTFS$bin"
	for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
		[ -e "$ROOTFS$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$ROOTFS$lib"
	done
}

build_binaries() {
	mkdir -p "$BUILD/bin"
	log "building the test binary"
	local pkg=./vm
	[ "$SUITE" = k8s ] && pkg=./k8s/vlan
	(cd "$ROOT/integration" && CGO_ENABLED=0 $GO test -c -trimpath -ldflags '-s -w' -o "$BUILD/bin/vm.test" $pkg) ||
		die "building integration/${pkg#./} failed"
	if [ "$SUITE" = k8s ]; then
		rm -rf "$BUILD/images" && mkdir -p "$BUILD/images"
		[ -x "${PODWIRE_MULTUS:-}/multus-daemon" ] ||
			die "PODWIRE_MULTUS must name scripts/multus-build.sh's directory (run make test-vm-k8s)"
		(cd "$ROOT/integration" && $GO run ./k8s/cluster/vmimages "$BUILD/images" "$PODWIRE_MULTUS") ||
			die "building the pause, VRRP and Multus images failed"
		(cd "$ROOT/tools/image" && CGO_ENABLED=0 $GO build -trimpath -ldflags '-s -w' -o "$BUILD/bin/podwire-image" .) ||
			die "building tools/image failed"
		(cd "$ROOT/integration" && $GO build -o "$BUILD/bin/vmcontrolplane" ./k8s/cluster/vmcontrolplane) ||
			die "building the control plane's runner failed"
		[ -r "${PODWIRE_IMAGE:-}" ] && [ -n "${PODWIRE_IMAGE_REF:-}" ] ||
			die "PODWIRE_IMAGE and PODWIRE_IMAGE_REF must name make image's archive and reference (run make test-vm-k8s)"
	fi
	rm -f "$BUILD/bin/podwire"
	if [ -n "${PODWIRE_BIN:-}" ]; then
		[ -x "$PODWIRE_BIN" ] || die "PODWIRE_BIN=$PODWIRE_BIN is not an executable (run make build)"
		cp "$PODWIRE_BIN" "$BUILD/bin/podwire"
	elif [ "${PODWIRE_VM_PLUGIN:-1}" = 1 ]; then
		log "building podwire"
		(cd "$ROOT" && CGO_ENABLED=0 $GO build -trimpath -ldflags '-s -w' -o "$BUILD/bin/podwire" ./plugins/podwire) ||
			die "building podwire failed"
	fi
	local p pkg
	for p in ptp host-local; do
		if [ -x "$ROOT/.cache/cni-bin/$p" ]; then
			cp "$ROOT/.cache/cni-bin/$p" "$BUILD/bin/$p"
			continue
		fi
		pkg=github.com/containernetworking/plugins/plugins/main/$p
		[ $p = host-local ] && pkg=github.com/containernetworking/plugins/plugins/ipam/host-local
		log "building $p $CNI_PLUGINS_VERSION"
		GOBIN=$BUILD/bin CGO_ENABLED=0 $GO install "$pkg@$CNI_PLUGINS_VERSION" || die "building $p failed"
	done
}

# The k8s suite's control plane: etcd, the apiserver, the controller-manager
# and the scheduler on the host, in the netns CP_NS whose tap device cp0 is
# the VM's NIC CP_MAC (the VM makes it a port of its nodes' switch). Its CA
# and URL go into the initramfs; stop_control_plane ends it by PID.
CP_NS=podwire-vmcp-$$
CP_DIR=$BUILD/controlplane
CP_IP=10.99.0.250/24
CP_MAC=52:54:00:99:00:fa
CP_PID=
start_control_plane() {
	rm -rf "$CP_DIR" && mkdir -p "$CP_DIR"
	ip netns add "$CP_NS"
	trap stop_control_plane EXIT
	ip -n "$CP_NS" link set lo up
	ip -n "$CP_NS" tuntap add dev cp0 mode tap
	ip -n "$CP_NS" addr add "$CP_IP" dev cp0
	ip -n "$CP_NS" link set cp0 up
	local v
	for v in PODWIRE_K8S_BIN PODWIRE_ETCD; do
		[ -n "${!v:-}" ] || die "$v is unset (run make test-vm-k8s)"
	done
	ip netns exec "$CP_NS" "$BUILD/bin/vmcontrolplane" -k8s-bin "$PODWIRE_K8S_BIN" -etcd "$PODWIRE_ETCD" -dir "$CP_DIR" \
		2>"$BUILD/controlplane.log" &
	CP_PID=$!
	local i
	for ((i = 0; i < 600; i++)); do
		[ -e "$CP_DIR/ready" ] && break
		kill -0 "$CP_PID" 2>/dev/null || die "the control plane exited: $(tail -20 "$BUILD/controlplane.log")"
		sleep 0.2
	done
	[ -e "$CP_DIR/ready" ] || die "the control plane was not ready in 120s: $(tail -20 "$BUILD/controlplane.log")"
	log "$(tail -1 "$BUILD/controlplane.log")"
}

stop_control_plane() {
	if [ -n "$CP_PID" ]; then
		kill -TERM "$CP_PID" 2>/dev/null || true
		wait "$CP_PID" 2>/dev/null || true
		CP_PID=
	fi
	ip netns del "$CP_NS" 2>/dev/null || true
}

build_initramfs() {
	rm -rf "$ROOTFS"
	mkdir -p "$ROOTFS"/{bin,sbin,usr/bin,usr/sbin,lib/modules,opt/cni/bin,proc,sys,dev,run,tmp,etc,var/lib}
	install -m 0755 /bin/busybox "$ROOTFS/bin/busybox"
	install -m 0755 "$ROOT/integration/vm/init" "$ROOTFS/init"
	install -m 0755 "$BUILD/bin/vm.test" "$ROOTFS/vm.test"
	local b
	if [ "$SUITE" = k8s ]; then
		install -m 0644 "$BUILD/images/pause.oci.tar" "$ROOTFS/pause.oci.tar"
		install -m 0644 "$BUILD/images/vrrp.oci.tar" "$ROOTFS/vrrp.oci.tar"
		install -m 0644 "$BUILD/images/multus.oci.tar" "$ROOTFS/multus.oci.tar"
		install -m 0644 "$PODWIRE_IMAGE" "$ROOTFS/podwire-image.tar"
		install -m 0755 "$BUILD/bin/podwire-image" "$ROOTFS/usr/bin/podwire-image"
		cp -r "$ROOT/deploy/helm/podwire" "$ROOTFS/chart"
		mkdir -p "$ROOTFS/controlplane/pki"
		install -m 0600 "$CP_DIR/pki/ca.crt" "$CP_DIR/pki/ca.key" "$ROOTFS/controlplane/pki/"
		install -m 0644 "$CP_DIR/url" "$ROOTFS/controlplane/url"
	fi
	for b in podwire ptp host-local; do
		[ -x "$BUILD/bin/$b" ] && install -m 0755 "$BUILD/bin/$b" "$ROOTFS/opt/cni/bin/$b"
	done
	copy_dynamic "$(command -v ip)"
	copy_dynamic "$(command -v bridge)"

	local m p mods=$MODULES
	[ "$SUITE" = k8s ] && mods="$mods $K8S_MODULES"
	for m in $mods; do
		p=$(module_path "$m")
		[ -n "$p" ] || die "module $m not found in $MODDIR/modules.dep"
		add_module "$p"
	done
	: >"$ROOTFS/lib/modules/load.order"
	for p in "${LOAD_ORDER[@]}"; do
		copy_module "$p"
		echo "$(basename "${p%%.ko*}").ko" >>"$ROOTFS/lib/modules/load.order"
	done
	for m in $ONDEMAND_MODULES; do
		p=$(module_path "$m")
		[ -n "$p" ] || die "module $m not found in $MODDIR/modules.dep"
		copy_module "$p"
	done

	{
		echo "PODWIRE_VM=1"
		echo "PODWIRE_VM_RUN='$RUN'"
		echo "PODWIRE_VM_BENCH='$BENCH'"
		echo "PODWIRE_VM_BENCHTIME='$BENCHTIME'"
		echo "PODWIRE_VM_TEST_TIMEOUT=$((TIMEOUT > 120 ? TIMEOUT - 60 : TIMEOUT))s"
		echo "PODWIRE_VM_SUITE=$SUITE"
		if [ "$SUITE" = k8s ]; then
			echo "PODWIRE_PAUSE_ARCHIVE=/pause.oci.tar"
			echo "PODWIRE_VRRP_ARCHIVE=/vrrp.oci.tar"
			echo "PODWIRE_MULTUS_ARCHIVE=/multus.oci.tar"
			echo "PODWIRE_IMAGE=/podwire-image.tar"
			echo "PODWIRE_IMAGE_REF='$PODWIRE_IMAGE_REF'"
			echo "PODWIRE_IMAGE_TOOL=/usr/bin/podwire-image"
			echo "PODWIRE_CHART=/chart"
			echo "PODWIRE_CONTROL_PLANE=/controlplane"
			echo "PODWIRE_CONTROL_PLANE_NIC=cp0"
			echo "PODWIRE_CONTROL_PLANE_MAC=$CP_MAC"
			local v val
			for v in $K8S_ENV; do
				val=${!v:-}
				[ -n "$val" ] || die "$v is unset (run make test-vm-k8s)"
				case $val in
				"$CACHE"/*) echo "$v=/cache/${val#"$CACHE"/}" ;;
				*) die "$v=$val is not under $CACHE, which the VM sees as /cache" ;;
				esac
			done
		fi
	} >"$ROOTFS/etc/podwire-vm.env"

	(cd "$ROOTFS" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$BUILD/initramfs.gz"
	log "initramfs $(du -h "$BUILD/initramfs.gz" | cut -f1), kernel $KVER, ${#LOAD_ORDER[@]} modules"
}

boot() {
	local console=$BUILD/console.log start rc status
	local share=() netns=()
	if [ "$SUITE" = k8s ]; then
		share=(-virtfs "local,path=$CACHE,mount_tag=cache,security_model=none,readonly=on"
			-netdev "tap,id=cp,ifname=cp0,script=no,downscript=no" -device "virtio-net-pci,netdev=cp,mac=$CP_MAC")
		netns=(ip netns exec "$CP_NS")
	fi
	start=$(date +%s)
	log "booting $KERNEL (accel $ACCEL, ${MEM}M, $SMP cpus, timeout ${TIMEOUT}s)"
	set +e
	timeout --foreground -k 10 "$TIMEOUT" "${netns[@]}" qemu-system-x86_64 \
		-accel "$ACCEL" -cpu max -m "$MEM" -smp "$SMP" \
		-nodefaults -display none -no-reboot \
		-serial stdio \
		"${share[@]}" \
		-kernel "$KERNEL" -initrd "$BUILD/initramfs.gz" \
		-append "console=ttyS0 quiet loglevel=4 panic=-1 rdinit=/init" \
		</dev/null 2>&1 | tee "$console"
	rc=${PIPESTATUS[0]}
	set -e
	log "VM ran $(($(date +%s) - start))s, qemu status $rc, console in $console"
	status=$(tr -d '\r' <"$console" | grep -ao 'PODWIRE-VM-EXIT=[0-9]*' | tail -1 | cut -d= -f2 || true)
	if [ -z "$status" ]; then
		[ "$rc" = 124 ] && die "VM timed out after ${TIMEOUT}s without reporting an exit status"
		die "VM did not report an exit status (did it boot?); see $console"
	fi
	local passed skipped
	passed=$(grep -ac -- '^--- PASS' "$console" || true)
	skipped=$(grep -ac -- '--- SKIP' "$console" || true)
	if [ -n "$BENCH" ]; then
		passed=$(grep -ac -- '^Benchmark' "$console" || true)
		[ "$status" != 0 ] || [ "$passed" != 0 ] || die "no benchmark ran in the VM (PODWIRE_VM_BENCH='$BENCH'?)"
	elif [ "$status" = 0 ] && [ "$passed" = 0 ]; then
		die "no test ran in the VM (PODWIRE_VM_RUN='$RUN'?)"
	fi
	if [ "$status" = 0 ] && [ "$SUITE" = k8s ]; then
		echo "vm-k8s: PASS, $passed scenarios, in $(($(date +%s) - start))s"
	elif [ "$status" = 0 ]; then
		log "PASS ($passed passed, $skipped skipped)"
	else
		log "FAIL: tests in the VM exited with status $status"
	fi
	exit "$status"
}

mkdir -p "$BUILD"
ensure_packages
pick_kernel
build_binaries
[ "$SUITE" = k8s ] && start_control_plane
build_initramfs
boot
