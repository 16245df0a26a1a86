#!/usr/bin/env bash
# Installs, on a fresh Debian 12 machine as root, what podwire's demo, tests
# and benchmark call: the Debian packages of scripts/deps.list (the one list;
# scripts/check-deps.sh, run by `make lint`, fails when a script or test calls
# a program none of them provides). Go and git come with the machine; the
# reference CNI plugins and cnitool are built from the Go module proxy by
# `make tools`.
#
# `make demo` and `make test` run it through their `deps` prerequisite, which
# first asks `install-deps.sh --check` (one dpkg-query, a few ms): it exits 1
# and names the missing packages, or exits 0 when every one is installed.
set -euo pipefail
cd "$(dirname "$0")"

mapfile -t pkgs < <(sed 's/#.*//' deps.list | tr -s ' \t' '\n' | grep -v '^$')
# Installed packages of the list, one query for all (unknown names print
# nothing on stdout).
mapfile -t have < <(dpkg-query -W -f='${Package} ${Status}\n' "${pkgs[@]}" 2>/dev/null |
	awk '$NF == "installed" && $(NF-1) == "ok" {print $1}')
missing=()
for p in "${pkgs[@]}"; do
	[[ " ${have[*]} " == *" $p "* ]] || missing+=("$p")
done
if [ "${1:-}" = --check ]; then
	if ((${#missing[@]})); then
		echo "missing Debian packages: ${missing[*]}" >&2
		exit 1
	fi
	exit 0
fi
if ((${#missing[@]})); then
	echo "installing: ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
