package podmeta

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"
)

// Refusal is an ADD refused by an admin gate of Admit: the CNI error the
// runtime gets (Err, error 7 naming the annotation and the config key) and
// the gate that refused it (an agentapi.Refusal* reason), which the plugin
// reports to the node agent for its metrics. skel finds Err with
// errors.As, so the runtime sees the CNI error unchanged.
type Refusal struct {
	Gate string
	Err  *types.Error
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// refuse is a Refusal of gate with CNI error 7 and msg.
func refuse(gate, msg string) *Refusal {
	return &Refusal{Gate: gate, Err: types.NewError(types.ErrInvalidNetworkConfig, msg, "")}
}

// RefusalGate is the gate of a refusal of Admit, or "" when err is not one.
func RefusalGate(err error) string {
	if r := (*Refusal)(nil); errors.As(err, &r) {
		return r.Gate
	}
	return ""
}
