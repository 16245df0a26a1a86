# Fixture of main_test.go, sourced by wrappers.sh: its functions are not
# programs, its wrapper is followed and its own calls are scanned.
in_() {
	local n=$1
	shift
	ip netns exec "$n" "$@"
}
lib_sleep() { sleep 1; }
