package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/google/nftables"
	"github.com/podwire/podwire/internal/testns"
)

// killExec is libcni's plugin executor with a knife: while armed, podwire's
// ADD is SIGKILLed after a random delay in [0, maxDelay). Every other plugin
// and verb runs as libcni runs it. The child is started from the calling
// goroutine's thread, so it inherits the node netns as libcni's own exec
// does.
type killExec struct {
	*invoke.DefaultExec

	mu       sync.Mutex
	armed    bool
	verb     string // the verb to kill: ADD or DEL
	maxDelay time.Duration
	rng      *rand.Rand
	// results of the last podwire ADD
	killed  bool
	elapsed time.Duration
}

func newKillExec() *killExec {
	return &killExec{
		DefaultExec: &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}},
		rng:         rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 8)),
	}
}

func isEnv(environ []string, kv string) bool {
	for _, e := range environ {
		if e == kv {
			return true
		}
	}
	return false
}

func (k *killExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	k.mu.Lock()
	verb := k.verb
	if verb == "" {
		verb = "ADD"
	}
	k.mu.Unlock()
	if filepath.Base(pluginPath) != "podwire" || !isEnv(environ, "CNI_COMMAND="+verb) {
		return k.DefaultExec.ExecPlugin(ctx, pluginPath, stdin, environ)
	}
	k.mu.Lock()
	armed, delay := k.armed, time.Duration(0)
	if armed && k.maxDelay > 0 {
		delay = time.Duration(k.rng.Int64N(int64(k.maxDelay)))
	}
	k.mu.Unlock()

	var stdout, stderr bytes.Buffer
	c := exec.Command(pluginPath)
	c.Env = environ
	c.Stdin = bytes.NewReader(stdin)
	c.Stdout, c.Stderr = &stdout, &stderr
	begin := time.Now()
	if err := c.Start(); err != nil {
		return nil, err
	}
	var timer *time.Timer
	if armed {
		timer = time.AfterFunc(delay, func() { _ = c.Process.Signal(syscall.SIGKILL) })
	}
	err := c.Wait()
	if timer != nil {
		timer.Stop()
	}
	killed := false
	if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		killed = true
	}
	k.mu.Lock()
	k.killed, k.elapsed = killed, time.Since(begin)
	k.mu.Unlock()
	if killed {
		return nil, fmt.Errorf("podwire killed with SIGKILL after %v", delay)
	}
	if err != nil {
		te := &types.Error{}
		if jerr := json.Unmarshal(stdout.Bytes(), te); jerr == nil && te.Msg != "" {
			return nil, te
		}
		return nil, fmt.Errorf("podwire: %v: %s", err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

func (k *killExec) last() (bool, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.killed, k.elapsed
}

func (k *killExec) arm(on bool, maxDelay time.Duration) { k.armVerb("ADD", on, maxDelay) }

func (k *killExec) armVerb(verb string, on bool, maxDelay time.Duration) {
	k.mu.Lock()
	k.verb, k.armed, k.maxDelay = verb, on, maxDelay
	k.mu.Unlock()
}

// TestCrashDuringAdd kills podwire with SIGKILL at a random point of ADD,
// 200 times, on one node that keeps two bystander pods (one ordinary, one
// forwarding with a route). Victims alternate between ordinary and
// forwarding pods with a route; every 20th attempt first deletes the
// "inet podwire" table, so that the kill may also land in the rebuild. After
// each attempt the runtime's DEL (libcni, no cached result when ADD failed)
// and a GC keeping the bystanders leave nothing of the victim: no record, no
// set element, no route, no temporary state file, the lock free, and the
// bystanders' elements exact. Every tenth attempt, and after each table
// deletion, a fresh pod's ADD (not killed) passes CHECK and is deleted.
// When an ADD finishes before its kill, its DEL is killed at a random point
// instead, and the runtime's retried DEL and GC must leave nothing.
// The kill delay is uniform in [0, the median of the unkilled podwire ADDs).
func TestCrashDuringAdd(t *testing.T) {
	const wantKills = 200
	n := newNode(t)
	ke := newKillExec()
	n.CNI = libcni.NewCNIConfigWithCacheDir(
		[]string{filepath.Dir(podwireBin), cniBinDir}, filepath.Join(n.Dir, "cache"), ke)

	// Bystanders; their ADDs calibrate the delay range.
	var times []time.Duration
	var live []relPod
	for _, i := range []int{1, 3} {
		p := n.mustAddPod(relSpec(i))
		_, d := ke.last()
		times = append(times, d)
		live = append(live, relPod{p: p, i: i, fwd: i%3 == 0})
	}
	for j := 0; j < 3; j++ {
		p := n.mustAddPod(relSpec(2))
		_, d := ke.last()
		times = append(times, d)
		if err := p.Del(); err != nil {
			t.Fatal(err)
		}
		p.ReleaseNS()
	}
	// The delay range follows the median of every unkilled ADD so far.
	median := func() time.Duration {
		s := append([]time.Duration(nil), times...)
		sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
		return s[len(s)/2]
	}
	t.Logf("podwire ADD takes %v (median of %d)", median(), len(times))
	relAssertNode(t, n, live, nil)

	// One pod netns serves every victim: ptp's DEL removes eth0 from it.
	podNS := testns.New(t)
	if err := podNS.Do(func(ns.NetNS) error {
		_, err := sysctl.Sysctl("net.ipv6.conf.default.accept_dad", "0")
		return err
	}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	kills, completed, attempts, fresh, recorded, delKills := 0, 0, 0, 0, 0, 0
	victimRoutes := []int{200, 201} // 201%3 == 0: forwarding
	for kills < wantKills && attempts < 3*wantKills {
		attempts++
		vi := victimRoutes[attempts%2]
		spec := relSpec(vi)
		list := n.conflist("1.1.0", spec.podwire)
		rt := spec.runtimeConf(podNS.Path())
		dropTable := attempts%20 == 0
		if dropTable {
			relDeleteTable(t, n)
		}
		ke.arm(true, median())
		var addErr error
		n.Do(func() error {
			_, addErr = n.CNI.AddNetworkList(context.Background(), list, rt)
			return nil
		})
		ke.arm(false, 0)
		killed, took := ke.last()
		switch {
		case killed:
			kills++
			if _, err := os.Stat(filepath.Join(n.StateDir(), rt.ContainerID+"_eth0.json")); err == nil {
				recorded++ // killed after the record was written
			}
		case addErr == nil:
			completed++
			times = append(times, took)
			n.Do(func() error {
				if err := n.CNI.CheckNetworkList(context.Background(), list, rt); err != nil {
					t.Errorf("attempt %d: CHECK after an ADD that was not killed: %v", attempts, err)
				}
				return nil
			})
		default:
			t.Fatalf("attempt %d: ADD failed without a kill: %v\nlog:\n%s", attempts, addErr, relTail(n.Log(), 30))
		}
		if addErr == nil {
			// The ADD finished: kill its DEL instead, as a node reboot or
			// an OOM kill would; the runtime's retried DEL must finish it.
			ke.armVerb("DEL", true, median())
			n.Do(func() error {
				_ = n.CNI.DelNetworkList(context.Background(), list, rt)
				return nil
			})
			ke.armVerb("ADD", false, 0)
			if k, _ := ke.last(); k {
				delKills++
			}
		}
		// The runtime's answer to a failed ADD (or DEL): DEL, then GC.
		n.Do(func() error {
			if err := n.CNI.DelNetworkList(context.Background(), list, rt); err != nil {
				t.Fatalf("attempt %d (killed %v): DEL: %v\nlog:\n%s", attempts, killed, err, relTail(n.Log(), 30))
			}
			return nil
		})
		if err := n.gc(list, live[0].p, live[1].p); err != nil {
			t.Fatalf("attempt %d (killed %v): GC: %v\nlog:\n%s", attempts, killed, err, relTail(n.Log(), 30))
		}
		if dropTable || attempts%10 == 0 {
			// A fresh pod's ADD works (and repairs a deleted table).
			p := n.mustAddPod(relSpec(2))
			_, took := ke.last()
			times = append(times, took)
			if err := p.Check(); err != nil {
				t.Errorf("attempt %d: CHECK of a fresh pod after the kill: %v", attempts, err)
			}
			relAssertNode(t, n, append(append([]relPod(nil), live...), relPod{p: p, i: 2}), nil)
			if err := p.Del(); err != nil {
				t.Fatalf("attempt %d: DEL of the fresh pod: %v", attempts, err)
			}
			p.ReleaseNS()
			fresh++
		}
		relAssertNode(t, n, live, []int{vi})
		if t.Failed() {
			t.Fatalf("attempt %d (killed %v) left the node inconsistent\nlog:\n%s", attempts, killed, relTail(n.Log(), 30))
		}
	}
	if kills < wantKills {
		t.Fatalf("only %d kills in %d attempts", kills, attempts)
	}
	t.Logf("crash: %d attempts, %d killed mid-ADD (%d after the record was written) and cleaned up by DEL+GC, %d ADDs finished before the kill (%d of their DELs killed, then retried), %d fresh ADDs verified, ADD median %v, %v",
		attempts, kills, recorded, completed, delKills, fresh, median(), time.Since(start))
}

// relDeleteTable deletes "inet podwire" in the node netns, as an admin's
// `nft delete table inet podwire` would.
func relDeleteTable(t *testing.T, n *node) {
	t.Helper()
	c := n.nftConn()
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire"})
	if err := c.Flush(); err != nil && !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("delete table inet podwire: %v", err)
	}
}
