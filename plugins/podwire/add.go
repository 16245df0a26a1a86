package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/ruleset"
)

// agentTimeout bounds the wait for the node agent's answer (it may be
// restarting); then ADD fails with CNI error 11, try again later.
const agentTimeout = 5 * time.Second

// cmdAdd: annotations → gates → node snapshot → pure plan → record written
// (incomplete) → node tables ensured → every step's add → the attachment's
// elements in one batch → record complete → result. Any failure after the
// record rolls back what ran (teardown).
func (p *plugin) cmdAdd(args *skel.CmdArgs) error {
	s, err := p.newSession(args, "ADD")
	if err != nil {
		return err
	}
	if s.conf.Result == nil {
		return types.NewError(types.ErrInvalidNetworkConfig,
			"podwire must be chained after a plugin that returns a result (no prevResult)", "")
	}
	in := &planInput{conf: s.conf, containerID: args.ContainerID, ifName: args.IfName, netns: args.Netns,
		pod: s.pod, prevResult: s.conf.Result, now: time.Now()}
	if err := s.resolveAnnotations(in); err != nil {
		return err
	}
	if err := podmeta.Admit(s.conf, s.pod, in.ann); err != nil {
		s.log.Warn("refused", "error", err)
		return err
	}
	if old, err := s.store.Get(args.ContainerID, args.IfName); err == nil && old != nil {
		// A repeated ADD for the same attachment: undo the first one, so
		// nothing it made is left unrecorded (and its names are free for
		// the plan).
		s.log.Warn("ADD for an attachment that exists: removing the old one first")
		if err := s.attach(old).teardown(len(steps)); err != nil {
			return err
		}
	}
	in.env = p.readEnv(in)
	plan, err := planAttachment(in)
	if err != nil {
		return err
	}
	x := s.attach(plan.rec)
	x.res, x.env = s.conf.Result, in.env
	if err := s.store.Put(x.rec); err != nil {
		return err
	}
	ran := 0
	success := false
	defer func() {
		if !success {
			if err := x.teardown(ran); err != nil {
				x.log.Error("rollback incomplete", "error", err)
			}
		}
	}()
	// Even with no table wanted: a table the config no longer wants goes.
	if err := s.ensureTables(plan.tables); err != nil {
		return err
	}
	for _, st := range steps {
		ran++
		a, ok := st.(adder)
		if !ok {
			continue
		}
		if err := a.add(x); err != nil {
			x.log.Error("ADD failed", "step", st.name(), "error", err)
			return fmt.Errorf("%s: %w", st.name(), err)
		}
	}
	if len(plan.elems) > 0 {
		c, err := s.conn()
		if err != nil {
			return err
		}
		if err := nft.AddElements(c, plan.tables, plan.elems); err != nil {
			return err
		}
	}
	if x.rec.Unchecked != "" {
		x.log.Warn("the pod's source addresses cannot be checked", "reason", x.rec.Unchecked)
		if err := x.markUnchecked(); err != nil {
			return err
		}
	}
	x.rec.Complete = true
	if err := s.store.Put(x.rec); err != nil {
		return err
	}
	success = true
	x.log.Info("ADD done", "forwarding", x.rec.Forwarding, "hostIf", x.rec.HostIfName, "addresses", x.rec.Addresses)
	return types.PrintResult(x.res, s.conf.CNIVersion)
}

// resolveAnnotations reads the pod's annotations, from the runtime or the
// node agent, into in.
func (s *session) resolveAnnotations(in *planInput) error {
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	raw, source, err := podmeta.Resolve(ctx, s.conf.RuntimeConfig.PodAnnotations, s.pod, podmeta.AgentFetcher{Socket: s.conf.AgentSocket})
	if err != nil {
		return err
	}
	if in.ann, err = podmeta.ParseAnnotations(raw); err != nil {
		return err
	}
	s.log = s.log.With("annotations", source)
	in.source = source
	return nil
}

// teardown undoes an attachment from its record: the set elements, then the
// deleters among the first n steps in reverse, then the record, under the
// node lock. It carries on past errors and returns them all; "not found" is
// success throughout.
func (x *invocation) teardown(n int) error {
	unlock, err := x.lock.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	if e := ruleset.Elements(x.conf, x.rec); len(e) > 0 {
		if c, err := x.conn(); err != nil {
			errs = append(errs, err)
		} else if err := nft.DeleteElements(c, e); err != nil {
			errs = append(errs, err)
		}
	}
	for i := n - 1; i >= 0; i-- {
		if d, ok := steps[i].(deleter); ok {
			if err := d.del(x); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", steps[i].name(), err))
			}
		}
	}
	if err := x.store.ClearUnchecked(x.rec); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := x.store.Delete(x.rec.ContainerID, x.rec.IfName); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// markUnchecked indexes the attachment as one whose sources podwire cannot
// check, for STATUS, under the node lock.
func (x *invocation) markUnchecked() error {
	unlock, err := x.lock.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	return x.store.MarkUnchecked(x.rec)
}
