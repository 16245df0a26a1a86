// Package vm holds the VM suite: root tests of bridge VLAN filtering, 802.1Q
// and the bridge nftables family, which the development kernel lacks. They run
// natively where the kernel can (and skip, saying why, where it cannot), and
// for real under Debian's stock kernel in QEMU through scripts/vm-test.sh
// (`make test-vm`), which sets PODWIRE_VM=1 so that a missing capability fails
// instead of skipping.
//
// Every test makes and removes its own network namespaces, including a "node"
// namespace that stands in for the host, so that nothing touches the network
// of the machine (or the VM) the tests run on. Behaviour is proven with
// packets between namespaces, never by reading back configuration.
package vm
