#!/usr/bin/env bash
# check-deps.sh fails when a script, a test or the benchmark calls a program
# that no Debian package of scripts/deps.list provides (the packages
# scripts/install-deps.sh installs on a fresh machine), naming the program,
# where it is called and the line to add to scripts/deps.list. The programs are
# found mechanically by tools/checkdeps (shell parsed with mvdan.cc/sh, Go with
# go/ast); here each is resolved with `type -P` and `dpkg -S`: a package of the
# list, one that is Essential or of priority required pass.
#
# Usage: scripts/check-deps.sh [FILE...]   (default: every tracked shell
# script, .ci/run and every tracked Go file). DEPS_LIST names another list.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
deps=${DEPS_LIST:-$ROOT/scripts/deps.list}
if [ $# -gt 0 ]; then
	files=()
	for f in "$@"; do files+=("$(realpath "$f")"); done
else
	cd "$ROOT"
	mapfile -t files < <(git ls-files '*.sh' '*.go' .ci/run | grep -v '^tools/checkdeps/testdata/' | sed "s|^|$ROOT/|")
fi
calls=$(${GO:-go} run -C "$ROOT/tools/checkdeps" . "${files[@]}")
listed=" $(sed 's/#.*//' "$deps" | tr -s ' \t\n' ' ') "
# Programs a fresh machine has before install-deps.sh (Go and git) or that
# `make build tools` builds; the repository's own (scripts/x.sh, bin/podwire)
# are relative paths.
given=" go gofmt git podwire cnitool ptp host-local tuning portmap bridge-plugin loopback "
calls=$(while IFS=$'\t' read -r prog where; do
	[[ -z $prog || $given == *" ${prog##*/} "* || ($prog == */* && $prog != /*) ]] || printf '%s\t%s\n' "$prog" "$where"
done <<<"$calls")

# Each program's path, and the paths dpkg may know it under: its target and
# their /bin <-> /usr/bin twins (merged /usr).
declare -A path cands
while IFS=$'\t' read -r prog where; do
	[ -n "$prog" ] || continue
	p=$(type -P -- "$prog" || true)
	path[$prog]=$p
	[ -n "$p" ] || continue
	c=("$p" "$(realpath "$p")")
	for x in "${c[@]}"; do
		case $x in /usr/*) c+=("${x#/usr}") ;; *) c+=("/usr$x") ;; esac
	done
	cands[$prog]="${c[*]}"
done <<<"$calls"

# One dpkg -S for all (it reads the whole file database: a second a call);
# it exits 1 when some path is not found and prints the others as
# "pkg[:arch][, pkg2]: path"; "diversion by ..." lines are skipped.
declare -A owner
# shellcheck disable=SC2046
while IFS= read -r line; do
	case $line in "diversion by"*) continue ;; esac
	pkg=${line%%: /*} p=/${line#*: /}
	pkg=${pkg%%,*} pkg=${pkg%%:*}
	[ -n "${owner[$p]:-}" ] || owner[$p]=$pkg
done < <(dpkg -S $(printf '%s\n' "${cands[@]}" | tr ' ' '\n' | sort -u) 2>/dev/null || true)

status=0
while IFS=$'\t' read -r prog where; do
	[ -n "$prog" ] || continue
	p=${path[$prog]} pkg=
	for c in ${cands[$prog]:-}; do
		pkg=${owner[$c]:-}
		[ -z "$pkg" ] || break
	done
	if [ -z "$p" ]; then
		echo "check-deps: $where calls \"$prog\", which is not installed here: add the Debian package that provides it (\`apt-file search bin/${prog##*/}\`) to $deps and run scripts/install-deps.sh" >&2
	elif [ -z "$pkg" ]; then
		echo "check-deps: $where calls \"$prog\" ($p), which no Debian package provides (dpkg -S): install it from a package and add that package to $deps" >&2
	elif [[ $listed == *" $pkg "* ]] || dpkg-query -W -f '${Essential} ${Priority}' "$pkg" | grep -qE '^yes|required$'; then
		continue
	else
		printf 'check-deps: %s calls "%s" (%s), provided by the Debian package "%s", which %s does not name: add the line\n    %s\nto %s\n' \
			"$where" "$prog" "$p" "$pkg" "$deps" "$pkg" "$deps" >&2
	fi
	status=1
done <<<"$calls"
exit $status
