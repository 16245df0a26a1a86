#!/usr/bin/env bash
# Installs, on a fresh Debian 12 machine as root, what podwire's tests and
# demo need: iproute2 (ip, bridge) for the VM image, QEMU with Debian's kernel
# and busybox for the VLAN suite, containerd and runc for the CRI end-to-end
# test; ping and nft for the demo's claims and its ruleset print. Go comes with the machine (/usr/local/go); the reference CNI plugins
# and cnitool are built from the Go module proxy by `make tools`.
set -euo pipefail

pkgs=(iproute2 iputils-ping nftables qemu-system-x86 linux-image-amd64 busybox-static containerd runc)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "installing: ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
