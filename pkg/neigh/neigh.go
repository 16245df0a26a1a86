// Package neigh makes the kernel announce a pod interface's addresses right
// after wiring, so that the neighbours on its L2 segment (the node bridge, a
// switch behind the uplink, other pods) replace a stale entry for a reused
// address at once: a gratuitous ARP per IPv4 address and an unsolicited
// neighbour advertisement (override flag set) per IPv6 address.
//
// # When an announcement changes anything
//
// With Linux's default arp_accept=0, a gratuitous ARP only updates an entry
// the receiver already has (net/ipv4/arp.c, arp_process); without
// accept_untracked_na an unsolicited NA does the same (net/ipv6/ndisc.c,
// ndisc_recv_na). A point-to-point veth (ptp, Calico, Cilium) is created with
// the pod, and its host side, the only neighbour, has no entry yet:
// announcing there changes nothing, so podwire sends nothing there. It
// announces where neighbours outlive the pod: on a pod interface whose host
// side is a port of a bridge (or any other master: OVS, a bond), which is
// podwire's own VLAN interface and a primary such as flannel's cni0 or the
// reference bridge plugin's. See [SharedSegment].
//
// # How: the kernel announces, no packet socket
//
// An AF_PACKET socket (github.com/j-keck/arping) costs a full RCU grace
// period when it is released (synchronize_net() in net/packet/af_packet.c,
// packet_release), which an ADD would wait for. Instead, [Announce] sets
// net.ipv4.conf.<if>.arp_notify and net.ipv6.conf.<if>.ndisc_notify and asks
// the kernel to set the interface's MAC to its current value (RTM_SETLINK
// with IFLA_ADDRESS). netif_set_mac_address (net/core/dev.c) skips the driver
// when the address is unchanged but still calls the NETDEV_CHANGEADDR
// notifiers, and these announce synchronously, inside the netlink request:
// inetdev_event (net/ipv4/devinet.c) calls inetdev_send_gratuitous_arp for
// every IPv4 address when arp_notify is set, and ndisc_netdev_event
// (net/ipv6/ndisc.c) calls ndisc_send_unsol_na for every IPv6 address when
// ndisc_notify is set.
//
// Announcing at link up instead (NETDEV_UP, the same notifiers) does not
// reach the segment: when a veth end comes up its peer, the bridge port, gets
// carrier, but the bridge only starts forwarding on that port when the link
// watch work has run (NETDEV_CHANGE, br_port_carrier_check), after the
// announcements were dropped. So [WaitOperUp] waits for the port first.
//
// # Side effects and limits
//
//   - NETDEV_CHANGEADDR flushes the interface's neighbour entries
//     (neigh_changeaddr, in arp_netdev_event and ndisc_netdev_event),
//     permanent ones included. The pod re-resolves the dynamic ones on use;
//     [Announce] puts the permanent ones back.
//   - The interface's addr_assign_type becomes NET_ADDR_SET (3).
//   - arp_notify and ndisc_notify stay set, as the reference bridge plugin
//     leaves arp_notify: the pod announces itself again when it brings the
//     interface up or changes its MAC.
//   - A tentative IPv6 address (duplicate address detection still running)
//     is not announced: ndisc_send_unsol_na skips it, as RFC 4862 (5.4)
//     wants. An optimistic address (RFC 4429) is announced without the
//     override flag (ndisc_send_na), so it does not replace a neighbour's
//     entry. Primaries that run DAD wait for it before returning
//     (containernetworking's ipam.ConfigureIface, ip.SettleAddresses); the
//     reference bridge plugin turns DAD off unless asked, and podwire adds
//     VLAN addresses with IFA_F_NODAD.
//   - For a forwarding pod (net.ipv6.conf.*.forwarding=1) the kernel sets
//     the router flag in the advertisement, as RFC 4861 (7.2.6) asks.
//
// Announcements are best effort: callers log the errors and carry on.
package neigh

import "github.com/vishvananda/netlink"

// SharedSegment reports whether a pod interface whose host side (in the
// node's netns) is host shares an L2 segment with neighbours that may hold a
// stale entry for a reused address: true when host is enslaved to a master
// (a bridge, OVS, a bond). A host veth without master is a point-to-point
// link whose only neighbour, the node, learns the pod on first use.
func SharedSegment(host netlink.Link) bool {
	return host != nil && host.Attrs().MasterIndex != 0
}
