package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/sourcecheck"
)

// podwireTables lists the podwire tables ("family name") in the node netns.
func (n *node) podwireTables() ([]string, error) {
	c, err := nftables.New(nftables.WithNetNSFd(int(n.ns.Fd())))
	if err != nil {
		return nil, err
	}
	defer c.CloseLasting()
	ts, err := c.ListTables()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range ts {
		if strings.HasPrefix(t.Name, nft.OwnerPrefix) {
			out = append(out, nft.ID{Family: t.Family, Name: t.Name}.String())
		}
	}
	return out, nil
}

// deletePodwireTables removes every podwire table from the node netns (a
// node whose tables are absent: the next ADD is a first invocation), with
// the same function `podwire uninstall` uses.
func (n *node) deletePodwireTables() error {
	c, err := nftables.New(nftables.WithNetNSFd(int(n.ns.Fd())))
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	_, err = nodetables.RemoveAll(c)
	return err
}

// fakeBridgedPods adds count pods' elements (a port each, one IPv4 and one
// IPv6 address) to "bridge podwire" in the node netns, with no port behind
// them: the set sizes of a node with that many pods on its bridge, for the
// throughput through the bridge check.
func (n *node) fakeBridgedPods(count int) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(n.ns.Fd())))
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	e := nft.Elements{}
	for i := 0; i < count; i++ {
		sourcecheck.AddElements(e, sourcecheck.Pod{
			HostIfName: fmt.Sprintf("vethfk%08x", i), Bridged: true, Name: fmt.Sprintf("bench/fake-%d", i),
			Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, 251, byte(i >> 8), byte(i)}),
				netip.MustParseAddr(fmt.Sprintf("fd00:251::%x", i))},
		})
	}
	return nft.AddElements(c, []*nft.Table{sourcecheck.BridgeTable()}, e)
}
