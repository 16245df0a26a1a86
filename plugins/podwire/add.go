package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/install"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/ruleset"
)

// agentTimeout bounds the wait for the node agent's answer; then ADD fails
// with CNI error 11, try again later. It covers a rolling upgrade of the
// DaemonSet (maxUnavailable 1: the old agent's pod ends, the new one's
// starts and listens), so pods created on the node meanwhile wait instead
// of failing their sandbox.
const agentTimeout = 15 * time.Second

// cmdAdd: annotations → gates → node snapshot → pure plan → record written
// (incomplete) → node tables ensured → VLAN port → forwarding → the
// attachment's elements in one batch → record complete → announcements →
// result. Any failure after the record is written rolls back with teardown,
// exactly what DEL does from the record (every undo is idempotent: a DEL
// after a crash at any point runs it too).
func (p *plugin) cmdAdd(args *skel.CmdArgs) error {
	s, err := p.newSession(args, "ADD")
	if err != nil {
		return err
	}
	defer s.closeIntact() // after the rollback's batch, if any
	if s.conf.Result == nil {
		return types.NewError(types.ErrInvalidNetworkConfig,
			"podwire must be chained after a plugin that returns a result (no prevResult)", "")
	}
	if install.Uninstalled(s.conf.StateDir) {
		return s.passThrough()
	}
	in := &planInput{conf: s.conf, containerID: args.ContainerID, ifName: args.IfName, netns: args.Netns,
		pod: s.pod, prevResult: s.conf.Result, now: time.Now()}
	if err := s.resolveAnnotations(in); err != nil {
		return err
	}
	if err := podmeta.Admit(s.conf, s.pod, in.ann); err != nil {
		return s.refused("", err)
	}
	old, err := s.store.Get(args.ContainerID, args.IfName)
	if err != nil {
		// A record this podwire cannot read (a newer podwire's schema, a
		// corrupt file) may describe what only its writer can undo:
		// overwriting it would strand that. It stays, for a podwire that
		// reads it.
		s.log.Error("ADD refused: the attachment's record cannot be read", "error", err)
		return types.NewError(types.ErrInternal, fmt.Sprintf(
			"attachment %s/%s has a record this podwire cannot read: refusing to overwrite it", args.ContainerID, args.IfName), err.Error())
	}
	if old != nil {
		// A repeated ADD for the same attachment: undo the first one, so
		// nothing it made is left unrecorded (and its names are free for
		// the plan).
		s.log.Warn("ADD for an attachment that exists: removing the old one first")
		if err := s.attach(old).teardown(); err != nil {
			return err
		}
	}
	// A pod that claims static VLAN addresses or routes holds the node
	// lock from the read of the other pods' claims to the first write of
	// its record (tenancy.go); every pod holds it for that write
	// (putFirst).
	unlockClaims := func() {}
	if claims(in) {
		if unlockClaims, err = s.lock.Lock(); err != nil {
			return err
		}
	}
	in.env = p.readEnv(in)
	plan, err := planAttachment(in)
	if err != nil {
		unlockClaims()
		if podmeta.RefusalGate(err) != "" {
			return s.refused("", err)
		}
		return err
	}
	// Checked on this node: now against every node's (tenancy.go).
	if err := s.claimCluster(plan.rec); err != nil {
		unlockClaims()
		if podmeta.RefusalGate(err) != "" {
			return s.refused("", err)
		}
		return err
	}
	x := s.attach(plan.rec)
	x.res, x.env = s.conf.Result, in.env
	err = x.putFirst()
	unlockClaims()
	if err != nil {
		x.releaseCluster()
		return err
	}
	success := false
	defer func() {
		if !success {
			if err := x.teardown(); err != nil {
				x.log.Error("rollback incomplete", "error", err)
			}
		}
	}()
	// Even with no table wanted: a table the config no longer wants goes.
	if err := s.ensureTables(plan.tables); err != nil {
		return err
	}
	if err := x.addVLAN(); err != nil {
		x.log.Error("ADD failed", "concern", "vlan", "error", err)
		return fmt.Errorf("vlan: %w", err)
	}
	if err := x.addForwarding(); err != nil {
		x.log.Error("ADD failed", "concern", "forwarding", "error", err)
		return fmt.Errorf("forwarding: %w", err)
	}
	x.warnNodeTables()
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
	// Last, best effort: the pod is wired and checked.
	x.announce()
	x.log.Info("ADD done", "forwarding", x.rec.Forwarding, "hostIf", x.rec.HostIfName, "addresses", x.rec.Addresses)
	return types.PrintResult(x.res, s.conf.CNIVersion)
}

// resolveAnnotations reads the pod's annotations, from the runtime or the
// node agent, into in, and the labels of its namespace from the agent when
// a gate selects namespaces by label.
func (s *session) resolveAnnotations(in *planInput) error {
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	agent := podmeta.AgentFetcher{Socket: s.conf.AgentSocket}
	raw, source, err := podmeta.Resolve(ctx, s.conf.RuntimeConfig.PodAnnotations, s.pod, agent)
	if err != nil {
		return err
	}
	if in.ann, err = podmeta.ParseAnnotations(raw); err != nil {
		return s.refused(agentapi.RefusalBadAnnotation, err)
	}
	if podmeta.NeedsNamespaceLabels(s.conf, s.pod, in.ann) {
		if s.pod.NamespaceLabels, err = agent.NamespaceLabels(ctx, s.pod.Namespace); err != nil {
			return err
		}
		in.pod = s.pod
	}
	s.log = s.log.With("annotations", source)
	in.source = source
	return nil
}

// teardown undoes an attachment from its record, in the reverse of ADD's
// order: the set elements, forwarding, the VLAN port, then the record,
// under the node lock. It carries on past errors and returns them all;
// "not found" is success throughout, so it is also ADD's rollback whatever
// ADD had made.
func (x *invocation) teardown() error {
	unlock, err := x.lock.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	if e := ruleset.Elements(x.conf, x.rec); len(e) > 0 {
		if c, err := x.conn(); err != nil {
			errs = append(errs, err)
		} else if err := nft.DeleteElements(x.carryIntact(c), e); err != nil {
			errs = append(errs, err)
		}
	}
	if err := x.delForwarding(); err != nil {
		errs = append(errs, fmt.Errorf("forwarding: %w", err))
	}
	if err := x.delVLAN(); err != nil {
		errs = append(errs, fmt.Errorf("vlan: %w", err))
	}
	if err := x.store.ClearUnchecked(x.rec); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := x.store.Delete(x.rec.ContainerID, x.rec.IfName); err != nil {
			errs = append(errs, err)
		} else {
			x.releaseCluster()
		}
	}
	return errors.Join(errs...)
}

// putFirst writes the attachment's first record under the node lock and
// there takes its host interface out of the unknown interfaces whose
// sources repair checks (forgetUnknown). The unknown-interface scan
// (`podwire repair --drop-unknown`) lists the records under the same lock,
// so either it sees this record and leaves the interface alone, or it
// checked the interface before, and forgetUnknown undoes that: a slow ADD
// never leaves a forwarding pod's interface checked. On an error nothing
// is left (the record is deleted again).
func (x *invocation) putFirst() error {
	unlock, err := x.lock.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := x.store.Put(x.rec); err != nil {
		return err
	}
	if err := x.forgetUnknown(); err != nil {
		if derr := x.store.Delete(x.rec.ContainerID, x.rec.IfName); derr != nil {
			x.log.Error("failed to delete the record again", "error", derr)
		}
		return fmt.Errorf("failed to take %s out of the unknown interfaces: %w", x.rec.HostIfName, err)
	}
	return nil
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
