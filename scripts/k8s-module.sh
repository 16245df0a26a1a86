# k8s-module.sh is sourced by the scripts that build from k8s.io/kubernetes'
# own packages (k8s-build.sh, e2e-build.sh). They set K8S_VERSION and source
# build-cache.sh (GO) first.
#
# Why a throwaway module: k8s.io/kubernetes is not meant to be required (its
# go.mod points its 33 staging modules at ./staging/src/...), but its
# packages build from a module that requires it and replaces each of those
# staging modules with the published k8s.io/<name> v0.<minor>.<patch>. The
# replace list is read from k8s.io/kubernetes' own go.mod, so it follows the
# version.

# k8s_module DIR NAME writes DIR/go.mod: module podwire.local/NAME, requiring
# k8s.io/kubernetes at K8S_VERSION, each staging module replaced.
k8s_module() {
	local dir=$1 name=$2 prog=${0##*/}
	prog=${prog%.sh}
	echo "$prog: resolving k8s.io/kubernetes@$K8S_VERSION"
	local gomod
	gomod=$("$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
	[[ -f $gomod ]] || { echo "$prog: no go.mod for k8s.io/kubernetes@$K8S_VERSION" >&2; return 1; }
	# Staging modules: "k8s.io/x => ./staging/src/k8s.io/x" in its replace block.
	local staging
	staging=$(awk '/^replace \(/{r=1; next} r && /^\)/{r=0} r && $2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod")
	[[ -n $staging ]] || { echo "$prog: no staging modules found in $gomod" >&2; return 1; }
	local staged=v0.${K8S_VERSION#v1.}
	{
		echo "module podwire.local/$name"
		echo
		echo "go $("$GO" env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		echo "replace ("
		for m in $staging; do echo "	$m => $m $staged"; done
		echo ")"
	} >"$dir/go.mod"
	echo "$prog: $(wc -w <<<"$staging") staging modules replaced with $staged"
}

# k8s_ldflags prints the linker flags that set the version variables of
# component-base and client-go, so that the binaries (and `kubectl version`)
# say K8S_VERSION instead of v0.0.0-master.
k8s_ldflags() {
	local minor=${K8S_VERSION#v1.}
	minor=${minor%%.*}
	local ldflags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	done
	echo "$ldflags"
}
