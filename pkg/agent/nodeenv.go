package agent

import (
	"context"
	"strings"
	"time"

	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/ruleset"
)

// envSettle is how long the agent waits after a change to the node's
// addresses or routes before it looks whether the tables should change: a
// burst (an interface's addresses, a pod's routes) makes one look.
const envSettle = 200 * time.Millisecond

// reconcileEnv looks whether the node tables should change after a change
// of the node's addresses or routes (envKey against the last repair's),
// and triggers their repair if so: a look, which touches no table.
//
// Triggers: the kernel's address and route notifications (notify.go),
// settled by envSettle. No backstop: the tables' own backstop repairs.
func (a *Agent) reconcileEnv(context.Context) error {
	if k, ok := a.envKey(); ok && k != a.tables.env {
		a.repairDue(0)
	}
	return nil
}

// envKey is what the node's tables should be now, as one string: each
// table's hash and the node tables' errors (egress IPs refused or not
// assigned), read as a repair reads them, without touching nftables. ok
// is false while podwire is in no chain or its entry cannot be read.
func (a *Agent) envKey() (key string, ok bool) {
	conflist := a.conflist()
	if conflist == "" {
		return "", false
	}
	conf, err := readEntryConf(conflist)
	if err != nil {
		return "", false
	}
	env := nodetables.ReadEnv(conf)
	var b strings.Builder
	for _, t := range ruleset.Tables(conf, env) {
		b.WriteString(t.ID().String() + " " + t.Hash() + "\n")
	}
	for _, e := range nodetables.Errors(nodetables.EnvWarnings(env)) {
		b.WriteString(e + "\n")
	}
	return b.String(), true
}
