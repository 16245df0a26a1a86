#!/usr/bin/env bash
# Installs, on a fresh Debian 12 machine as root, what podwire's demo, tests
# and benchmark call: the Debian packages of scripts/deps.list (the one list;
# scripts/check-deps.sh, run by `make lint`, fails when a script or test calls
# a program none of them provides). Go and git come with the machine; the
# reference CNI plugins and cnitool are built from the Go module proxy by
# `make tools`.
set -euo pipefail
cd "$(dirname "$0")"

mapfile -t pkgs < <(sed 's/#.*//' deps.list | tr -s ' \t' '\n' | grep -v '^$')
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "installing: ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
