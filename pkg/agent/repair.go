package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/noderepair"
)

// repairTables is the one place the agent verifies and repairs podwire's
// node tables: noderepair.Run, the code of `podwire repair`, which is ADD's
// own verify and apply (nft.Ensure with every step's tables and every
// record's elements, under the node lock) plus the unknown interfaces and
// the VLAN wiring. It runs in the agent's process, in the node's netns
// (the runner's thread), and the generations it commits are remembered as
// the agent's own (nftwatch.go).
//
// The repair must write what the next ADD verifies, which is the installed
// binary's ruleset: Chain.Sync installs this agent's own plugin before
// anything else, so the two are one build, unless the last sync failed.
// Then the installed binary (maybe another version) runs `podwire repair`
// as a process, so that the agent and the runtime's ADDs do not rebuild
// each other's tables.
func (a *Agent) repairTables(ctx context.Context, conflist string, now time.Time) (*cliapi.RepairResult, error) {
	a.tables.genKnown = false
	if !a.cfg.Chain.binaryCurrent() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return execRepair(cctx, filepath.Join(a.cfg.Chain.BinDir, "podwire"), conflist, a.repairOptions(now))
	}
	conf, err := readEntryConf(conflist)
	if err != nil {
		return nil, err
	}
	from, genErr := nft.Generation()
	res, err := noderepair.Run(conf, conflist, a.repairOptions(now))
	if genErr == nil {
		if to, err := nft.Generation(); err == nil {
			a.tables.own.add(ownWindow{from: from, to: to})
			a.tables.verifiedGen, a.tables.genKnown = to, true
		}
	}
	return res, err
}

// repairDue triggers the node tables' repair within after, as one that
// must verify: what the tables should be may have changed, or another
// owner changed them.
func (a *Agent) repairDue(after time.Duration) {
	a.tables.stale.Store(true)
	a.run.trigger(recTables, after)
}

// unchangedSinceRepair reports whether no commit at all reached nftables
// since the last repair: nftables' generation is the kernel's own count of
// commits, so an equal generation means no table changed (the check ADD's
// fast path makes, pkg/nft/intact.go). A backstop pass with nothing
// triggered since then has nothing to verify in the tables; the VLAN
// wiring, the unknown interfaces and the node's addresses have
// notifications of their own, whose loss resubscribes and repairs.
func (a *Agent) unchangedSinceRepair() bool {
	if !a.tables.genKnown {
		return false
	}
	g, err := nft.Generation()
	return err == nil && g == a.tables.verifiedGen
}

// reconcileTables verifies podwire's tables and repairs drift
// (repairTables); each repair is logged and recorded as an Event on the
// Node. What it found beyond the tables goes to their own reconcilers:
// the unknown interfaces' grace, a VLAN wiring it could not repair.
//
// Triggers: another owner's change to a podwire table (notify.go, after
// tableSettle); a change of what the tables should be (the chain, the
// egress annotation, the cluster's CIDRs, the node's addresses, unknown
// interfaces); Timing.RepairInterval as a backstop, which verifies only
// when nftables' generation moved (unchangedSinceRepair). A failure is
// retried with the runner's backoff.
func (a *Agent) reconcileTables(ctx context.Context) error {
	conflist := a.conflist()
	if conflist == "" {
		return nil // not in the chain yet: nothing says what the tables are
	}
	if !a.tables.stale.Swap(false) && a.unchangedSinceRepair() {
		return nil
	}
	// What the tables should be, read before the repair reads it: a
	// change after this read is seen again by the next look.
	if k, ok := a.envKey(); ok {
		a.tables.env = k
	}
	now := time.Now()
	res, err := a.repairTables(ctx, conflist, now)
	if err != nil {
		a.tables.stale.Store(true) // the retry verifies
		return err
	}
	a.noteUnknown(ctx, res.Unknown, now)
	a.noteEgressErrors(ctx, res.Errors)
	if err := a.noteVLAN(ctx, res); err != nil {
		a.run.trigger(recVLAN, time.Second)
	}
	a.st.mu.Lock()
	a.st.tablesVerified = true
	a.st.mu.Unlock()
	if !res.Repaired {
		return nil
	}
	a.m.repaired(res)
	a.st.mu.Lock()
	a.st.status.Repairs++
	a.st.status.LastRepair = now.UTC()
	a.st.lastRepaired = fmt.Sprintf("rebuilt %v, deleted %v, elements re-added %v", res.Rebuilt, res.Deleted, res.ElementsReadded)
	a.st.mu.Unlock()
	msg := fmt.Sprintf("podwire's nftables tables were missing or had drifted, and were repaired: rebuilt %v, deleted %v, elements re-added %v (wanted %v)",
		res.Rebuilt, res.Deleted, res.ElementsReadded, res.Tables)
	a.log.Warn(msg)
	a.ev.onNode(a.api.node.UID(), corev1.EventTypeNormal, ReasonTablesRepaired, msg)
	return nil
}

// execRepair runs the plugin binary's `podwire repair` with opts.
func execRepair(ctx context.Context, plugin, conflist string, opts noderepair.Options) (*cliapi.RepairResult, error) {
	args := []string{"repair", "--conflist", conflist}
	if opts.Unknown {
		args = append(args, "--unknown")
	}
	if len(opts.Drop) > 0 {
		args = append(args, "--drop-unknown", strings.Join(slices.Sorted(maps.Keys(opts.Drop)), ","))
	}
	cmd := exec.CommandContext(ctx, plugin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s repair: %v: %s", plugin, err, strings.TrimSpace(stderr.String()))
	}
	var res cliapi.RepairResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("%s repair: bad output %q: %w", plugin, out, err)
	}
	return &res, nil
}

// Event reasons the agent records on its Node.
const (
	ReasonTablesRepaired = "PodwireTablesRepaired"
	ReasonChainRestored  = "PodwireChainRestored"
	// ReasonEgressError: an egress IP refused by egress.allowedCIDRs, or
	// not assigned on the node (a Warning Event).
	ReasonEgressError = "PodwireEgressError"
)

// noteEgressErrors makes the node tables' errors of a repair the agent's
// finding "egress" (in its status, `podwire status` and /readyz's text, not
// its readiness: the source check still holds) and records each new set of
// them as a Warning Event on the Node.
func (a *Agent) noteEgressErrors(_ context.Context, errs []string) {
	msg := strings.Join(errs, "; ")
	a.m.egress.Set(float64(len(errs)))
	a.st.mu.Lock()
	old := a.st.findings["egress"]
	a.st.mu.Unlock()
	if msg == "" {
		a.setFinding("egress", nil)
		return
	}
	a.setFinding("egress", errors.New(msg))
	if msg == old {
		return
	}
	a.ev.onNode(a.api.node.UID(), corev1.EventTypeWarning, ReasonEgressError, msg)
}
