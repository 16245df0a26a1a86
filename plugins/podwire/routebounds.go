package main

import (
	"fmt"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/podwire/podwire/pkg/podmeta"
)

// routeBounds refuses a prefix of podwire.io/routes that would take over
// traffic the node must route elsewhere, whatever
// forwarding.routablePrefixes allows: a default route or half of one (a /0
// or a /1: the two /1 halves override a default route), or a prefix
// overlapping the pod networks of the primary's result (the pod's own
// subnet, this node's pod range), the cluster's pod CIDRs or its node IPs
// (stateDir's cluster file, which the node agent writes from every Node).
// The other nodes' agents apply the same bounds before they route a
// published prefix (pkg/agent, routes.go); here the pod that asks is told.
// Errors are CNI error 7 naming the annotation, the prefix and the bound,
// or 11 when the cluster file cannot be read.
func routeBounds(in *planInput) error {
	if len(in.ann.Routes) == 0 {
		return nil
	}
	if in.env.clusterErr != nil {
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf(
			"annotation %s: the cluster's pod CIDRs and node IPs, which routes must not overlap, cannot be read", podmeta.AnnotationRoutes),
			in.env.clusterErr.Error())
	}
	type bound struct {
		what string
		p    netip.Prefix
	}
	var bounds []bound
	var prev []*current.IPConfig
	if in.prevResult != nil {
		prev = in.prevResult.IPs
	}
	for _, ip := range prev {
		if ip == nil {
			continue
		}
		ones, _ := ip.Address.Mask.Size()
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok {
			bounds = append(bounds, bound{"the pod network of the primary's result", netip.PrefixFrom(a.Unmap(), ones).Masked()})
		}
	}
	if c := in.env.cluster; c != nil {
		for _, p := range c.PodCIDRs {
			bounds = append(bounds, bound{"the cluster's pod CIDR", p})
		}
		for _, p := range c.NodeIPs {
			bounds = append(bounds, bound{"the node IP", p})
		}
	}
	for _, r := range in.ann.Routes {
		if r.Bits() <= 1 {
			return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
				"annotation %s refused: %s is a default route or half of one (a /%d): it would take over the node's default route",
				podmeta.AnnotationRoutes, r, r.Bits()), "")
		}
		for _, b := range bounds {
			if b.p.IsValid() && r.Overlaps(b.p) {
				return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
					"annotation %s refused: %s overlaps %s %s: it would take over their traffic",
					podmeta.AnnotationRoutes, r, b.what, b.p), "")
			}
		}
	}
	return nil
}
