package main

import (
	"fmt"
	"strings"

	"github.com/google/nftables"
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
		if strings.HasPrefix(t.Name, "podwire") {
			out = append(out, fmt.Sprintf("%s %s", family(t.Family), t.Name))
		}
	}
	return out, nil
}

// deletePodwireTables removes every podwire table from the node netns (a
// node whose tables are absent: the next ADD is a first invocation).
func (n *node) deletePodwireTables() error {
	c, err := nftables.New(nftables.WithNetNSFd(int(n.ns.Fd())))
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	ts, err := c.ListTables()
	if err != nil {
		return err
	}
	for _, t := range ts {
		if strings.HasPrefix(t.Name, "podwire") {
			c.DelTable(t)
		}
	}
	return c.Flush()
}

func family(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyBridge:
		return "bridge"
	}
	return fmt.Sprint(f)
}
