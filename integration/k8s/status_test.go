package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podwire/podwire/pkg/atomicfile"
)

// networkWatch samples the runtime's NetworkReady condition through the
// CRI, as the kubelet reads it, every networkWatchInterval: each sample is
// one CRI Status call, in which containerd runs the chain's STATUS.
type networkWatch struct {
	mu      sync.Mutex
	samples []networkSample
	done    chan struct{}
	wg      sync.WaitGroup
}

type networkSample struct {
	at      time.Time
	ready   bool
	message string // the condition's message, or the CRI call's error
}

const networkWatchInterval = 250 * time.Millisecond

// crioStatusPeriod is how often CRI-O runs the network's STATUS once it
// was first ready (its CNI manager's monitor poll).
const crioStatusPeriod = 5 * time.Second

func startNetworkWatch(t *testing.T) *networkWatch {
	w := &networkWatch{done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			ready, reason, msg, err := n1.NetworkReady(ctx)
			cancel()
			s := networkSample{at: time.Now(), ready: ready && err == nil, message: reason + ": " + msg}
			if err != nil {
				s.message = err.Error()
			}
			w.mu.Lock()
			w.samples = append(w.samples, s)
			w.mu.Unlock()
			select {
			case <-w.done:
				return
			case <-time.After(networkWatchInterval):
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *networkWatch) stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
		w.wg.Wait()
	}
}

// since returns the samples taken at or after t0.
func (w *networkWatch) since(t0 time.Time) []networkSample {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []networkSample
	for _, s := range w.samples {
		if !s.at.Before(t0) {
			out = append(out, s)
		}
	}
	return out
}

// requireReadySince fails t unless every sample since t0 was
// NetworkReady=true, and there were at least min of them. It waits (up to
// half a minute) for the min-th: each sample is a CRI call, which a busy
// machine answers more slowly than networkWatchInterval.
func (w *networkWatch) requireReadySince(t *testing.T, t0 time.Time, what string, min int) {
	t.Helper()
	samples := w.since(t0)
	for deadline := time.Now().Add(30 * time.Second); len(samples) < min && time.Now().Before(deadline); samples = w.since(t0) {
		time.Sleep(networkWatchInterval)
	}
	var bad []string
	for _, s := range samples {
		if !s.ready {
			bad = append(bad, fmt.Sprintf("%s +%v: %s", what, s.at.Sub(t0).Round(time.Millisecond), s.message))
		}
	}
	if len(samples) < min {
		t.Errorf("%s: only %d NetworkReady samples in %v, want %d or more", what, len(samples), time.Since(t0).Round(time.Millisecond), min)
	}
	if len(bad) > 0 {
		t.Errorf("%s: NetworkReady=false at %d of %d samples: %v", what, len(bad), len(samples), bad)
	}
	t.Logf("%s: NetworkReady=true at all %d samples over %v", what, len(samples), time.Since(t0).Round(time.Millisecond))
}

// waitNetwork waits until a sample taken after t0 has ready, and returns
// it.
func (w *networkWatch) waitNetwork(ctx context.Context, t0 time.Time, ready bool) (networkSample, error) {
	for {
		for _, s := range w.since(t0) {
			if s.ready == ready {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return networkSample{}, fmt.Errorf("NetworkReady never became %v after %v", ready, t0.Format(time.TimeOnly))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitNodeReady waits until the Node's Ready condition is ready and
// returns its message.
func waitNodeReady(ctx context.Context, ready bool) (string, error) {
	for {
		s, err := n1.Status()
		if err == nil && s.Ready == ready {
			return s.ReadyMessage, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the Node's Ready never became %v: %v %+v", ready, err, s)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// podNetworkVersion is the cniVersion of the pod network (the network on
// eth0, not go-cni's loopback) in containerd's verbose CRI status, as
// Node.CNIConfig returns it; with crio, of the conflist CRI-O loaded.
func podNetworkVersion(cniConfig string, crio bool) (string, error) {
	if crio {
		var conflist struct{ CNIVersion string }
		err := json.Unmarshal([]byte(cniConfig), &conflist)
		return conflist.CNIVersion, err
	}
	var st struct {
		Networks []struct {
			Config struct{ Name, CNIVersion string }
			IFName string
		}
	}
	if err := json.Unmarshal([]byte(cniConfig), &st); err != nil {
		return "", fmt.Errorf("containerd's cniconfig: %w", err)
	}
	for _, n := range st.Networks {
		if n.IFName == "eth0" {
			return n.Config.CNIVersion, nil
		}
	}
	return "", fmt.Errorf("containerd's cniconfig has no network on eth0")
}

// TestStatusNodeReadiness: the node's chain (ptp, host-local, podwire) is
// at cniVersion 1.1.0, so containerd runs the chain's STATUS in every CRI
// Status call, and a failure of it sets NetworkReady=false, which the
// kubelet turns into a NotReady Node. Sampled through the CRI every
// 250 ms, NetworkReady stays true while the VLAN uplink the config names
// is missing (podwire's STATUS only warns, in its log), through a restart
// of the agent, and through the primary's installer rewriting its
// conflist without podwire until the agent puts podwire back. Then
// stateDir is made read-only in the node's mount namespace (a bind mount
// over /run/podwire, which the plugin sees and the agent's container does
// not): no ADD can record a pod, podwire's STATUS answers 50 naming
// stateDir, and NetworkReady turns false at the next CRI Status call and
// the Node NotReady with that message; that failure is also what shows that the runtime
// runs podwire's STATUS at all. Unmounted, both turn back, and the node
// loses the not-ready taints. It logs each latency, and how many STATUS
// runs podwire logged for the CRI Status calls made: containerd does not
// cache STATUS. CRI-O does: it runs STATUS every 5 s and answers the CRI
// from its last result, turning NetworkReady false at the second failing
// run (cni_status_grace_period); there the test checks that the failing
// runs were about one per 5 s of the fault, no more (no per-call runs) and
// at least one.
func TestStatusNodeReadiness(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if err := waitCNIConfig(ctx, true); err != nil {
		t.Fatal(err)
	}
	crio := c.Runtime().IsCRIO()
	conf, err := n1.CNIConfig(ctx)
	if crio {
		// CRI-O reports no loaded config: the conflist it last loaded.
		conf, err = crioLoaded()
	}
	if err != nil {
		t.Fatal(err)
	}
	if v, err := podNetworkVersion(conf, crio); err != nil || v != primaryCNIVersion {
		t.Fatalf("the runtime loaded the chain at cniVersion %q (%v), want %s (STATUS is called from 1.1.0):\n%s", v, err, primaryCNIVersion, conf)
	}
	t.Logf("runtime %s; chain at cniVersion %s", n1.RuntimeVersion(ctx), primaryCNIVersion)
	w := startNetworkWatch(t)

	// The missing uplink: a warning in podwire's log, written by a STATUS
	// that answered 0.
	t0 := time.Now()
	if !strings.Contains(string(podwireEntry), `"uplink":"`+missingUplink+`"`) {
		t.Fatalf("podwire's entry does not name the uplink %s: %s", missingUplink, podwireEntry)
	}
	if !logHas(podwireLog(), "STATUS", missingUplink, "missing") {
		t.Errorf("podwire's log has no STATUS warning about the uplink %s:\n%s", missingUplink, tail(podwireLog(), 3000))
	}
	time.Sleep(3 * time.Second)
	w.requireReadySince(t, t0, "uplink "+missingUplink+" missing", 5)

	// The agent restarted: its pod deleted, the DaemonSet's next one Ready.
	t0 = time.Now()
	kubectl(t, "", "-n", agentNS, "delete", "pods", "-l", "app.kubernetes.io/name=podwire-agent", "--wait=true", "--timeout=90s")
	kubectl(t, "", "-n", agentNS, "rollout", "status", "ds/podwire-agent", "--timeout=120s")
	w.requireReadySince(t, t0, "agent restarted", 5)

	// The primary's conflist rewritten without podwire, then restored by
	// the agent and reloaded by containerd. The rewrite is atomic (a
	// rename): a truncating write shows the runtime an empty conflist for
	// a moment, and containerd is then not ready whatever podwire does.
	t0 = time.Now()
	if err := atomicfile.WriteFile(n1.PrimaryConflist, n1.PrimaryConflistBytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := waitFile(ctx, n1.PrimaryConflist, func(b []byte) bool { return strings.Contains(string(b), `"podwire"`) }); err != nil {
		t.Fatalf("the agent did not restore podwire's entry: %v", err)
	}
	if err := waitCNIConfig(ctx, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	w.requireReadySince(t, t0, "primary conflist rewritten", 5)
	if s, err := n1.Status(); err != nil || !s.Ready {
		t.Fatalf("the Node is not Ready before the fault: %v %+v", err, s)
	}
	if t.Failed() {
		return
	}

	// stateDir unwritable: the node must not take pods.
	end := readiness.expectNotReady("stateDir read-only (TestStatusNodeReadiness)")
	defer end()
	statusLines := strings.Count(podwireLog(), "STATUS: plugin not available")
	mounted := true
	unmount := func() error {
		if !mounted {
			return nil
		}
		out, err := n1.Command(context.Background(), "umount", "/run/podwire").CombinedOutput()
		if err != nil {
			return fmt.Errorf("umount /run/podwire on the node: %v: %s", err, out)
		}
		mounted = false
		return nil
	}
	t.Cleanup(func() {
		if err := unmount(); err != nil {
			t.Error(err)
		}
	})
	if out, err := n1.Command(ctx, "sh", "-c", "mount --bind /run/podwire /run/podwire && mount -o remount,bind,ro /run/podwire").CombinedOutput(); err != nil {
		mounted = false
		t.Fatalf("read-only bind mount of /run/podwire on the node: %v: %s", err, out)
	}
	tFault := time.Now()
	ready, _, first, err := n1.NetworkReady(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stateDir read-only: the first CRI Status after it, %v later: NetworkReady=%v %s",
		time.Since(tFault).Round(time.Millisecond), ready, first)
	s, err := w.waitNetwork(ctx, tFault, false)
	if err != nil {
		t.Fatal(err)
	}
	// libcni passes the plugin's error message on without the plugin's
	// name: podwire's STATUS is the one that names stateDir.
	unwritable := `stateDir "/run/podwire" unwritable`
	if !strings.Contains(s.message, unwritable) {
		t.Errorf("NetworkReady=false is not podwire's STATUS error (%s): %s", unwritable, s.message)
	}
	waitCtx, waitCancel := context.WithTimeout(ctx, 90*time.Second)
	msg, err := waitNodeReady(waitCtx, false)
	waitCancel()
	if err != nil {
		t.Fatal(err)
	}
	tNodeNotReady := time.Now()
	if !strings.Contains(msg, "NetworkReady=false") || !strings.Contains(msg, unwritable) {
		t.Errorf("the Node's Ready=False message does not name the runtime network and stateDir: %s", msg)
	}
	t.Logf("stateDir read-only: NetworkReady=false after %v (%s); Node NotReady after %v: %s",
		s.at.Sub(tFault).Round(time.Millisecond), s.message, tNodeNotReady.Sub(tFault).Round(time.Millisecond), msg)

	// Fixed: both turn back. Each NetworkReady=false answer the test got
	// needs a STATUS run of its own unless containerd caches them.
	calls := 0
	if !ready {
		calls++
	}
	for _, s := range w.since(tFault) {
		if !s.ready {
			calls++
		}
	}
	runs := strings.Count(podwireLog(), "STATUS: plugin not available") - statusLines
	if err := unmount(); err != nil {
		t.Fatal(err)
	}
	tFix := time.Now()
	s, err = w.waitNetwork(ctx, tFix, true)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, waitCancel = context.WithTimeout(ctx, 90*time.Second)
	_, err = waitNodeReady(waitCtx, true)
	waitCancel()
	if err != nil {
		t.Fatal(err)
	}
	tNodeReady := time.Now()
	if err := c.WaitNodesReady(ctx); err != nil {
		t.Fatalf("the node kept a taint after Ready: %v", err)
	}
	t.Logf("stateDir writable again: NetworkReady=true after %v; Node Ready after %v, untainted after %v",
		s.at.Sub(tFix).Round(time.Millisecond), tNodeReady.Sub(tFix).Round(time.Millisecond), time.Since(tFix).Round(time.Millisecond))
	t.Logf("while read-only (%v): podwire logged %d failing STATUS runs; the test got %d NetworkReady=false answers, the kubelet its own",
		tFix.Sub(tFault).Round(time.Millisecond), runs, calls)
	switch fault := tFix.Sub(tFault); {
	case !crio && runs < calls:
		t.Errorf("%d failing STATUS runs for %d NetworkReady=false answers: containerd answered some from a cache", runs, calls)
	case crio && (runs < 2 || runs > int(fault/crioStatusPeriod)+2):
		t.Errorf("%d failing STATUS runs in %v: want CRI-O's poll, one per %v (2 or more: the grace period)", runs, fault.Round(time.Millisecond), crioStatusPeriod)
	}
}

// logHas reports whether a line of log holds every one of parts.
func logHas(log string, parts ...string) bool {
	for _, l := range strings.Split(log, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
