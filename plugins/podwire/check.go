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
// the node tables, the set elements, the host veth, the VLAN port and the
// forwarding routes and sysctls. Anything missing or wrong is an error naming it.
func (p *plugin) cmdCheck(args *skel.CmdArgs) error {
	s, err := p.newSession(args, "CHECK")
	if err != nil {
		return err
	}
	if s.conf.Result == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs a prevResult", "")
	}
	rec, err := s.store.Get(args.ContainerID, args.IfName)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("no podwire record for attachment %s/%s", args.ContainerID, args.IfName)
	}
	if !rec.Complete {
		return fmt.Errorf("attachment %s/%s: ADD did not complete", args.ContainerID, args.IfName)
	}
	x := s.attach(rec)
	x.res = s.conf.Result
	if want := ruleset.Tables(s.conf, p.node.tablesEnv(s.conf)); len(want) > 0 {
		c, err := s.conn()
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
		if err := nft.CheckElements(c, want, ruleset.Elements(s.conf, rec)); err != nil {
			return err
		}
	}
	if err := x.checkPrimary(); err != nil {
		return fmt.Errorf("primary: %w", err)
	}
	if err := x.checkVLAN(); err != nil {
		return fmt.Errorf("vlan: %w", err)
	}
	if err := x.checkForwarding(); err != nil {
		return fmt.Errorf("forwarding: %w", err)
	}
	return nil
}
