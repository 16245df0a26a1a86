#!/bin/sh
# Fixture of main_test.go: socat through a wrapper function, ip directly.
in_() { local n=$1; shift; ip netns exec "$n" "$@"; }
ip link show
in_ node0 socat -V
