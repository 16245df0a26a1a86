package main

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/ruleset"
)

// cmdCheck verifies podwire's own resources for the attachment: the record,
// the node tables, the set elements and every step's links, routes and
// sysctls. Anything missing or wrong is an error naming it.
func cmdCheck(args *skel.CmdArgs) error {
	a, err := newAttachment(args, "CHECK")
	if err != nil {
		return err
	}
	if a.conf.Result == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs a prevResult", "")
	}
	a.res = a.conf.Result
	rec, err := a.store.Get(args.ContainerID, args.IfName)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("no podwire record for attachment %s/%s", args.ContainerID, args.IfName)
	}
	if !rec.Complete {
		return fmt.Errorf("attachment %s/%s: ADD did not complete", args.ContainerID, args.IfName)
	}
	a.rec = rec
	if want := a.tables(); len(want) > 0 {
		c, err := a.conn()
		if err != nil {
			return err
		}
		for _, t := range want {
			drift, err := nft.Verify(c, t)
			if err != nil {
				return err
			}
			if len(drift) > 0 {
				return fmt.Errorf("node table %s is not current: %s", t.ID(), strings.Join(drift, "; "))
			}
		}
		if err := nft.CheckElements(c, want, ruleset.Elements(a.conf, rec)); err != nil {
			return err
		}
	}
	for _, s := range steps {
		if err := s.check(a); err != nil {
			return fmt.Errorf("%s: %w", s.name(), err)
		}
	}
	return nil
}
