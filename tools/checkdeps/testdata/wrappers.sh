#!/bin/sh
# Fixture of main_test.go: wrappers are followed to the program they run.
ip netns exec "$n" nft list ruleset
nsenter --net=/x -- containerd -c c.toml
timeout -k 5 10 socat -V
env A=b strace -c true
command -v qemu-img
exec qemu-system-x86_64 -nographic
for t in ping tcpdump; do command -v "$t"; done
"$cmd" --help
echo builtin, not a program
. "$(dirname "$0")/lib.sh"
in_ ns1 arping -c 1 192.0.2.1
lib_sleep
