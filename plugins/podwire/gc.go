package main

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/config"
)

// cmdGC removes every resource of attachments that are not valid (CNI 1.1
// GC). The valid list is cni.dev/valid-attachments, or the older
// cni.dev/attachments; a key present with the value null means that none is
// valid (config.GCValidAttachments cites what libcni sends). When the
// runtime sends neither key, GC removes nothing: an absent list means
// "unknown", not "none" (deleting every pod's state on a malformed request
// would cut every pod off). GC carries on past errors and reports them all;
// one without errors finishes an uninstall as DEL does (finishUninstall).
func (p *plugin) cmdGC(args *skel.CmdArgs) error {
	s, err := p.newSession(args, "GC")
	if err != nil {
		return err
	}
	defer s.closeIntact()
	valid, sent, err := config.GCValidAttachments(args.StdinData)
	if err != nil {
		return err
	}
	if !sent {
		s.log.Warn("GC without cni.dev/valid-attachments: nothing removed")
		return nil
	}
	keep := make(map[string]bool, len(valid))
	for _, v := range valid {
		keep[v.ContainerID+"/"+v.IfName] = true
	}
	recs, listErr := s.store.List()
	var errs []error
	if listErr != nil {
		errs = append(errs, listErr)
	}
	removed := 0
	for _, rec := range recs {
		if keep[rec.Key()] {
			continue
		}
		if rec.Network != "" && s.conf.Name != "" && rec.Network != s.conf.Name {
			continue // another network's attachment: not ours to judge
		}
		x := s.attach(rec)
		x.log = s.log.With("gcContainerID", rec.ContainerID, "gcIfname", rec.IfName)
		if err := x.teardown(); err != nil {
			errs = append(errs, fmt.Errorf("attachment %s: %w", rec.Key(), err))
			continue
		}
		// Named one by one: a GC removes what no DEL did, which an
		// operator looking for a lost pod's state wants to find.
		x.log.Info("GC removed an attachment the runtime no longer has", "pod", rec.PodRef())
		removed++
	}
	s.log.Info("GC done", "removed", removed, "errors", len(errs))
	if len(errs) == 0 {
		s.finishUninstall()
	}
	if len(errs) > 0 {
		return types.NewError(types.ErrInternal, "GC incomplete", errors.Join(errs...).Error())
	}
	return nil
}
