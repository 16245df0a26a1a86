package main

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/forwarding"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/state"
)

// forwardingStep makes an admitted forwarding pod forward (pkg/forwarding):
// forwarding on and rp_filter off in its netns, rp_filter off on its host
// interface (old value recorded, restored on DEL), and the node routes of
// podwire.io/routes via the pod's address. The source-check step leaves
// forwarding pods out of its sets. The gates ran before (podmeta.Admit).
type forwardingStep struct{}

func (forwardingStep) name() string { return "forwarding" }

func (forwardingStep) plan(a *attachment) error {
	a.rec.Forwarding = a.ann.Forwarding
	if a.ann.Forwarding && a.rec.HostIfName != "" {
		key := forwarding.RPFilterKey(a.rec.HostIfName)
		old, err := forwarding.GetSysctl(key)
		if err != nil {
			return fmt.Errorf("host interface of the pod: %w", err)
		}
		if a.rec.HostSysctls == nil {
			a.rec.HostSysctls = map[string]string{}
		}
		a.rec.HostSysctls[key] = old
	}
	if len(a.ann.Routes) == 0 {
		return nil
	}
	if a.rec.HostIfName == "" {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
			"annotation %s refused: the pod's host interface is unknown", podmeta.AnnotationRoutes), "")
	}
	routes, err := forwarding.PlanRoutes(a.ann.Routes, a.rec.Addresses, a.rec.HostIfName)
	if err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
			"annotation %s refused: %v", podmeta.AnnotationRoutes, err), "")
	}
	for _, r := range routes {
		a.rec.Routes = append(a.rec.Routes, state.Route{Dst: r.Dst, Via: r.Via, Dev: r.Dev})
	}
	return nil
}

func (forwardingStep) add(a *attachment) error {
	if a.rec.Forwarding {
		if w := forwarding.RPFilterWarning(); w != "" {
			a.log.Warn(w)
		}
		if a.rec.HostIfName != "" {
			if err := forwarding.SetSysctl(forwarding.RPFilterKey(a.rec.HostIfName), "0"); err != nil {
				return err
			}
		}
		if err := forwarding.EnablePod(a.args.Netns); err != nil {
			return err
		}
	}
	return forwarding.AddRoutes(recordRoutes(a.rec))
}

// del removes the routes and restores the host-side rp_filter. A route, an
// interface or a sysctl that is gone is success: the primary plugin may have
// deleted the veth already. The pod netns needs nothing: its sysctls go with
// it.
func (forwardingStep) del(a *attachment) error {
	var errs []error
	if err := forwarding.DelRoutes(recordRoutes(a.rec)); err != nil {
		errs = append(errs, err)
	}
	if a.rec.HostIfName != "" {
		key := forwarding.RPFilterKey(a.rec.HostIfName)
		if old, ok := a.rec.HostSysctls[key]; ok {
			if err := forwarding.SetSysctl(key, old); err != nil && !forwarding.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return joinErrors(errs)
}

func (forwardingStep) check(a *attachment) error {
	if err := forwarding.CheckRoutes(recordRoutes(a.rec)); err != nil {
		return err
	}
	if !a.rec.Forwarding {
		return nil
	}
	if a.rec.HostIfName != "" {
		key := forwarding.RPFilterKey(a.rec.HostIfName)
		got, err := forwarding.GetSysctl(key)
		if err != nil {
			return err
		}
		if got != "0" {
			return fmt.Errorf("host sysctl %s is %s, want 0", key, got)
		}
	}
	if a.args.Netns != "" {
		return forwarding.CheckPod(a.args.Netns)
	}
	return nil
}

func recordRoutes(rec *state.Record) []forwarding.Route {
	out := make([]forwarding.Route, 0, len(rec.Routes))
	for _, r := range rec.Routes {
		out = append(out, forwarding.Route{Dst: r.Dst, Via: r.Via, Dev: r.Dev})
	}
	return out
}
