package main

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/forwarding"
	"github.com/podwire/podwire/pkg/podmeta"
	"github.com/podwire/podwire/pkg/state"
)

// An admitted forwarding pod is made to forward (pkg/forwarding):
// forwarding on and rp_filter off in its netns, rp_filter off on its host
// interface (old value recorded, restored on DEL), and the node routes of
// podwire.io/routes via the pod's address. The source check leaves
// forwarding pods out of its sets. The gates ran before (podmeta.Admit).

// planForwarding keys on rec.HostIfName: planPrimary runs first.
func planForwarding(in *planInput, rec *state.Record) error {
	rec.Forwarding = in.ann.Forwarding
	if in.ann.Forwarding && rec.HostIfName != "" {
		if in.env.hostRPFilterErr != nil {
			return fmt.Errorf("host interface of the pod: %w", in.env.hostRPFilterErr)
		}
		rec.HostSysctls = map[string]string{forwarding.RPFilterKey(rec.HostIfName): in.env.hostRPFilter}
	}
	if len(in.ann.Routes) == 0 {
		return nil
	}
	if rec.HostIfName == "" {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
			"annotation %s refused: the pod's host interface is unknown", podmeta.AnnotationRoutes), "")
	}
	if err := routeBounds(in); err != nil {
		return err
	}
	routes, err := forwarding.PlanRoutes(in.ann.Routes, rec.Addresses, routeDev(rec))
	if err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
			"annotation %s refused: %v", podmeta.AnnotationRoutes, err), "")
	}
	rec.Routes = routes
	return nil
}

// routeDev is the node's layer-3 interface toward the pod: the bridge on
// a bridging primary (flannel's cni0), whose port the host veth is, else
// the host veth. A route out of a bridge port would never resolve the
// pod's MAC: the pod's ARP or NA reply enters the bridge and updates the
// bridge's neighbour table, not the port's.
func routeDev(rec *state.Record) string {
	if rec.HostBridge != "" {
		return rec.HostBridge
	}
	return rec.HostIfName
}

// addForwarding turns forwarding on in the pod, rp_filter off on its host
// interface, and adds the node routes.
func (x *invocation) addForwarding() error {
	if x.rec.Forwarding {
		if w := x.sysctls.rpFilterWarning(); w != "" {
			x.log.Warn(w)
		}
		if x.rec.HostIfName != "" {
			if err := x.sysctls.set(forwarding.RPFilterKey(x.rec.HostIfName), "0"); err != nil {
				return err
			}
		}
		if err := x.sysctls.enablePodForwarding(x.args.Netns); err != nil {
			return err
		}
	}
	return x.routes.addRoutes(x.rec.Routes)
}

// delForwarding removes the routes and restores the host-side rp_filter. A route, an
// interface or a sysctl that is gone is success: the primary plugin may have
// deleted the veth already. The pod netns needs nothing: its sysctls go with
// it.
func (x *invocation) delForwarding() error {
	var errs []error
	if err := x.routes.delRoutes(x.rec.Routes); err != nil {
		errs = append(errs, err)
	}
	if x.rec.HostIfName != "" {
		key := forwarding.RPFilterKey(x.rec.HostIfName)
		if old, ok := x.rec.HostSysctls[key]; ok {
			if err := x.sysctls.set(key, old); err != nil && !forwarding.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// checkForwarding verifies the routes and, for a forwarding pod, the
// sysctls on both sides.
func (x *invocation) checkForwarding() error {
	if err := x.routes.checkRoutes(x.rec.Routes); err != nil {
		return err
	}
	if !x.rec.Forwarding {
		return nil
	}
	if x.rec.HostIfName != "" {
		key := forwarding.RPFilterKey(x.rec.HostIfName)
		got, err := x.sysctls.get(key)
		if err != nil {
			return err
		}
		if got != "0" {
			return fmt.Errorf("host sysctl %s is %s, want 0", key, got)
		}
	}
	if x.args.Netns != "" {
		return x.sysctls.checkPodForwarding(x.args.Netns)
	}
	return nil
}
