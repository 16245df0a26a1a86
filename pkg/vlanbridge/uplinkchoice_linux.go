package vlanbridge

import (
	"errors"
	"os"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
)

// FindUplink chooses the uplink among candidates in the calling thread's
// netns, the node's ([ChooseUplink]): the first that is a link there.
func FindUplink(candidates []string) (string, error) {
	node, _ := os.Hostname()
	return ChooseUplink(node, candidates, func(name string) (bool, error) {
		_, err := netlinksafe.LinkByName(name)
		if err != nil {
			if errors.As(err, &netlink.LinkNotFoundError{}) {
				return false, nil
			}
			return false, err
		}
		return true, nil
	})
}
