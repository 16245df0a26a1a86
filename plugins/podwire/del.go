package main

import (
	"github.com/containernetworking/cni/pkg/skel"
)

// cmdDel removes what ADD made for the attachment, from its state record.
// It needs neither prevResult nor the netns: a runtime's second DEL has
// neither. No record means nothing to do (ADD never ran, failed cleanly, or a
// DEL already ran): success. After an uninstall (the agent's marker), the
// DEL that leaves no attachment removes podwire from the node
// (finishUninstall).
func (p *plugin) cmdDel(args *skel.CmdArgs) error {
	s, err := p.newSession(args, "DEL")
	if err != nil {
		return err
	}
	defer s.closeIntact()
	rec, err := s.store.Get(args.ContainerID, args.IfName)
	if err != nil {
		return err
	}
	if rec == nil {
		// ADD may have been killed while writing its first record: remove
		// the temporary file it left (nothing else was made before it).
		if err := s.store.Delete(args.ContainerID, args.IfName); err != nil {
			return err
		}
		s.log.Debug("DEL: no record, nothing to do")
		s.finishUninstall()
		return nil
	}
	if rec.Netns == "" || args.Netns != "" {
		rec.Netns = args.Netns // the runtime's current view wins
	}
	if err := s.attach(rec).teardown(); err != nil {
		s.log.Error("DEL incomplete", "error", err)
		return err
	}
	s.log.Info("DEL done")
	s.finishUninstall()
	return nil
}
