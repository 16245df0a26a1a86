# build-cache.sh is sourced by the scripts that build third-party programs
# from source into .cache (k8s-build.sh, e2e-build.sh, flannel-build.sh,
# helm-build.sh, coredns-build.sh): the build's start, its go.mod, its end.

# The flags the build cache is keyed by: keep them identical between runs so
# that a rebuild (a clean clone, CI) reuses the compiled packages.
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off
GO=${GO:-go}

# complete DIR STAMP BIN... succeeds when DIR holds every BIN, executable,
# and a .stamp file that reads STAMP (the versions it was built from).
complete() {
	local dir=$1 stamp=$2
	shift 2
	[[ -f $dir/.stamp && $(cat "$dir/.stamp") == "$stamp" ]] || return 1
	for b in "$@"; do [[ -x $dir/$b ]] || return 1; done
}

# start_build DIR STAMP BIN... ends the script when DIR is complete (as
# above); otherwise it makes the work directory $work, removed when the
# script exits.
start_build() {
	local prog=${0##*/}
	prog=${prog%.sh}
	if complete "$@"; then
		echo "$prog: $1 is complete"
		exit 0
	fi
	work=$(mktemp -d "/tmp/podwire-$prog.XXXXXX")
	trap 'rm -rf "$work"' EXIT
}

# go_version prints the language version of GO ("1.26"), the go line of a
# throwaway module.
go_version() {
	"$GO" env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/'
}

# go_module DIR NAME MODULE VERSION writes DIR/go.mod: module
# podwire.local/NAME, requiring MODULE at VERSION.
go_module() {
	printf 'module podwire.local/%s\n\ngo %s\n\nrequire %s %s\n' "$2" "$(go_version)" "$3" "$4" >"$1/go.mod"
}

# finish_build DIR STAMP FILE... moves every FILE into DIR, then writes the
# stamp that complete reads: last, so that an interrupted move is rebuilt.
finish_build() {
	local dir=$1 stamp=$2
	shift 2
	mkdir -p "$dir"
	mv -f "$@" "$dir/"
	echo "$stamp" >"$dir/.stamp"
}
