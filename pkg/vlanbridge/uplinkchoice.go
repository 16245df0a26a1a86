package vlanbridge

import (
	"fmt"
	"strings"
)

// MissingUplinkError is a node where no candidate of the uplink key is a
// link: the config serves the cluster, but none of its NIC names is this
// node's. It fails only what needs the uplink (a VLAN pod's ADD and CHECK).
type MissingUplinkError struct {
	// Candidates are the names looked for, in the order tried.
	Candidates []string
	// Node is the node's host name ("" when unknown): the Node's name
	// unless the kubelet overrides it.
	Node string
}

func (e *MissingUplinkError) Error() string {
	q := make([]string, len(e.Candidates))
	for i, c := range e.Candidates {
		q[i] = fmt.Sprintf("%q", c)
	}
	return fmt.Sprintf("no uplink on node %q: none of the uplink candidates %s is a link of the node; "+
		"name this node's NIC in the config's \"uplink\" list", e.Node, strings.Join(q, ", "))
}

// ChooseUplink returns the first of candidates (the config's uplink list,
// config.NetConf.Uplinks) for which exists reports a link on node. None
// there is a *MissingUplinkError naming every candidate and node; an error
// of exists stops the choice (a later candidate is not a stand-in for one
// that could not be looked up).
func ChooseUplink(node string, candidates []string, exists func(name string) (bool, error)) (string, error) {
	for _, name := range candidates {
		ok, err := exists(name)
		if err != nil {
			return "", fmt.Errorf("failed to look up uplink candidate %q: %w", name, err)
		}
		if ok {
			return name, nil
		}
	}
	return "", &MissingUplinkError{Candidates: candidates, Node: node}
}
