package config

import (
	"slices"
	"strings"
)

// The uplink key names the node's trunk NIC for the whole cluster, but the
// nodes of one cluster name their NICs differently (eth1 on one, ens5 on
// another), and one conflist entry serves them all. So the key is an
// ordered list of candidates, "eth1,ens5", and each node uses the first
// one that is a link of its netns (vlanbridge.FindUplink); a value of one
// name is a list of one. A comma is legal in a Linux interface name, but no
// NIC driver or udev naming scheme produces one, so it separates names here.

// UplinkSep separates the candidates of the uplink key.
const UplinkSep = ","

// ParseUplinks splits the value of the uplink key into its candidates, in
// order, white space around each name ignored. Each candidate must be a
// valid interface name (ValidateIfName) and appear once; "" is no uplink
// (nil). Errors are CNI error 7 naming the key and the value.
func ParseUplinks(value string) ([]string, error) {
	if value == "" {
		return nil, nil
	}
	var out []string
	for _, name := range strings.Split(value, UplinkSep) {
		name = strings.TrimSpace(name)
		if err := ValidateIfName(name); err != nil {
			return nil, Invalid("uplink", value, "candidate %d: %v", len(out)+1, err)
		}
		if slices.Contains(out, name) {
			return nil, Invalid("uplink", value, "candidate %q is named twice", name)
		}
		out = append(out, name)
	}
	return out, nil
}

// Uplinks are the uplink candidates of a parsed config, in the order the
// node tries them; nil for no uplink.
func (c *NetConf) Uplinks() []string {
	out, _ := ParseUplinks(c.Uplink) // validated by Parse
	return out
}

// validateUplink refuses an uplink value ParseUplinks refuses, and a
// candidate that is the bridge itself.
func (c *NetConf) validateUplink() error {
	cands, err := ParseUplinks(c.Uplink)
	if err != nil {
		return err
	}
	if slices.Contains(cands, c.Bridge) {
		return Invalid("uplink", c.Uplink, "candidate %q is the bridge itself", c.Bridge)
	}
	return nil
}
