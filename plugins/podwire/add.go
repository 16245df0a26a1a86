package main

import (
	"context"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/ruleset"
	"github.com/podwire/podwire/pkg/state"
)

// agentTimeout bounds the wait for the node agent's answer (it may be
// restarting); then ADD fails with CNI error 11, try again later.
const agentTimeout = 5 * time.Second

func cmdAdd(args *skel.CmdArgs) error {
	a, err := newAttachment(args, "ADD")
	if err != nil {
		return err
	}
	if a.conf.Result == nil {
		return types.NewError(types.ErrInvalidNetworkConfig,
			"podwire must be chained after a plugin that returns a result (no prevResult)", "")
	}
	a.res = a.conf.Result
	if err := a.resolveAnnotations(); err != nil {
		return err
	}
	if err := podmeta.Admit(a.conf, a.pod, a.ann); err != nil {
		a.log.Warn("refused", "error", err)
		return err
	}
	a.rec = &state.Record{
		ContainerID: args.ContainerID, IfName: args.IfName, Netns: args.Netns,
		Network: a.conf.Name, Created: time.Now().UTC(),
		PodNamespace: a.pod.Namespace, PodName: a.pod.Name, PodUID: a.pod.UID,
		AnnotationSource: a.source,
	}
	if old, err := a.store.Get(args.ContainerID, args.IfName); err == nil && old != nil {
		// A repeated ADD for the same attachment: undo the first one, so
		// nothing it made is left unrecorded.
		a.log.Warn("ADD for an attachment that exists: removing the old one first")
		// The same attachment, not a copy: the node lock's depth counter
		// must stay one.
		cur := a.rec
		a.rec = old
		err := a.teardown(len(steps))
		a.rec = cur
		if err != nil {
			return err
		}
	}
	for _, s := range steps {
		if err := s.plan(a); err != nil {
			return fmt.Errorf("%s: %w", s.name(), err)
		}
	}
	if err := a.store.Put(a.rec); err != nil {
		return err
	}
	ran := 0
	success := false
	defer func() {
		if !success {
			if err := a.teardown(ran); err != nil {
				a.log.Error("rollback incomplete", "error", err)
			}
		}
	}()
	if err := a.ensureTables(); err != nil {
		return err
	}
	for _, s := range steps {
		ran++
		if err := s.add(a); err != nil {
			a.log.Error("ADD failed", "step", s.name(), "error", err)
			return fmt.Errorf("%s: %w", s.name(), err)
		}
	}
	if e := ruleset.Elements(a.conf, a.rec); len(e) > 0 {
		c, err := a.conn()
		if err != nil {
			return err
		}
		if err := nft.AddElements(c, a.tables(), e); err != nil {
			return err
		}
	}
	a.rec.Complete = true
	if err := a.store.Put(a.rec); err != nil {
		return err
	}
	success = true
	a.log.Info("ADD done", "forwarding", a.rec.Forwarding, "hostIf", a.rec.HostIfName, "addresses", a.rec.Addresses)
	return types.PrintResult(a.res, a.conf.CNIVersion)
}

// resolveAnnotations reads the pod's annotations, from the runtime or the
// node agent.
func (a *attachment) resolveAnnotations() error {
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	raw, source, err := podmeta.Resolve(ctx, a.conf.RuntimeConfig.PodAnnotations, a.pod, podmeta.AgentFetcher{Socket: a.conf.AgentSocket})
	if err != nil {
		return err
	}
	if a.ann, err = podmeta.ParseAnnotations(raw); err != nil {
		return err
	}
	a.log = a.log.With("annotations", source)
	a.source = source
	return nil
}

// teardown undoes an attachment from its record: the set elements, then the
// first n steps in reverse, then the record. It carries on past errors and
// returns them all; "not found" is success throughout.
func (a *attachment) teardown(n int) error {
	unlock, err := a.nodeLock()
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	if e := ruleset.Elements(a.conf, a.rec); len(e) > 0 {
		if c, err := a.conn(); err != nil {
			errs = append(errs, err)
		} else if err := nft.DeleteElements(c, e); err != nil {
			errs = append(errs, err)
		}
	}
	for i := n - 1; i >= 0; i-- {
		if err := steps[i].del(a); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", steps[i].name(), err))
		}
	}
	if len(errs) == 0 {
		if err := a.store.Delete(a.rec.ContainerID, a.rec.IfName); err != nil {
			errs = append(errs, err)
		}
	}
	return joinErrors(errs)
}
