package main

// announce has the kernel announce the pod's addresses once everything is
// wired (the last thing ADD does), on the pod interfaces that share an L2
// segment with neighbours: the VLAN interface (a port of the node bridge)
// and a primary interface whose host veth has a master (flannel's cni0, the
// reference bridge plugin). Nothing is sent on a point-to-point primary
// (ptp, Calico, Cilium), where no neighbour holds an entry to correct (see
// package neigh). Best effort: a failure is logged and never fails ADD. It
// makes nothing that DEL must remove: it only adds.
func (x *invocation) announce() {
	var ifs []podHostIf
	if x.rec.HostIfName != "" && len(x.rec.Addresses) > 0 {
		ifs = append(ifs, podHostIf{x.args.IfName, x.rec.HostIfName})
	}
	if v := x.rec.VLAN; v != nil && len(v.IPs) > 0 {
		ifs = append(ifs, podHostIf{v.PodIfName, v.HostVeth})
	}
	if len(ifs) > 0 {
		x.neigh.announce(x.args.Netns, ifs, x.log)
	}
}
