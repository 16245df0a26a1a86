package main

import (
	"strings"

	"github.com/google/nftables"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
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
