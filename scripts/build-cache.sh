# build-cache.sh is sourced by the scripts that build third-party programs
# from source into .cache (k8s-build.sh, e2e-build.sh, flannel-build.sh,
# helm-build.sh, coredns-build.sh).

# The flags the build cache is keyed by: keep them identical between runs so
# that a rebuild (a clean clone, CI) reuses the compiled packages.
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off

# complete DIR STAMP BIN... succeeds when DIR holds every BIN, executable,
# and a .stamp file that reads STAMP (the versions it was built from).
complete() {
	local dir=$1 stamp=$2
	shift 2
	[[ -f $dir/.stamp && $(cat "$dir/.stamp") == "$stamp" ]] || return 1
	for b in "$@"; do [[ -x $dir/$b ]] || return 1; done
}
