package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

// relay is a TCP relay inside a real node's netns between its agent and
// the apiserver: what it counts is every byte of the agent's API traffic
// (TLS records included), each way.
type relay struct {
	ln       net.Listener
	toAgent  atomic.Int64 // bytes the apiserver sent the agent
	toServer atomic.Int64
}

// startRelay listens on 127.0.0.1 in n's netns (the socket stays in the
// namespace of the thread that made it) and relays to the apiserver.
func startRelay(n *cluster.Node) (*relay, error) {
	r := &relay{}
	err := ns.WithNetNSPath(n.NetNS, func(ns.NetNS) error {
		var err error
		r.ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	})
	if err != nil {
		return nil, err
	}
	tr := cluster.HTTPClientIn(n.NetNS).Transport.(*http.Transport)
	server := strings.TrimPrefix(c.APIServerURL(), "https://")
	go func() {
		for {
			conn, err := r.ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				up, err := tr.DialContext(context.Background(), "tcp", server)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { r.copy(up, conn, &r.toServer); done <- struct{}{} }()
				go func() { r.copy(conn, up, &r.toAgent); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return r, nil
}

func (r *relay) copy(dst, src net.Conn, n *atomic.Int64) {
	buf := make([]byte, 64<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			n.Add(int64(k))
			if _, werr := dst.Write(buf[:k]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
}

func (r *relay) addr() string { return r.ln.Addr().String() }

// agent is podwire's agent on a real node.
type agent struct {
	node  *cluster.Node
	cmd   *exec.Cmd
	relay *relay
	log   *os.File
	// routes reads the node's ProtoRemote routes.
	routes  netlinksafe.Handle
	stopped bool
}

// agentEntry is podwire's conflist entry on the real nodes: the chart's
// defaults and the routable prefixes the fake Nodes publish in.
func agentEntry() string {
	b, _ := json.Marshal(map[string]any{"forwarding": map[string]any{"namespaces": []string{"nf-*"}, "routablePrefixes": []string{routable.String()}}})
	return string(b)
}

// startAgent runs the agent binary in n's network and mount namespaces
// with the DaemonSet's flags (deploy/20-daemonset.yaml) but --cni-uninstall
// (its stop here is no uninstall), its ServiceAccount's token through a
// relay, and waits until /readyz answers ok.
func startAgent(ctx context.Context, n *cluster.Node, token string, r *relay) (*agent, error) {
	kubeconfig := filepath.Join(c.Dir, "agent-"+n.Name+".kubeconfig")
	if err := writeAgentKubeconfig(kubeconfig, "https://"+r.addr(), token); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(c.Dir, "logs", "agent-"+n.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := n.Command(context.Background(), env["PODWIRE_AGENT_BIN"],
		"--node-name="+n.Name, "--kubeconfig="+kubeconfig,
		"--cni-conf-dir=/etc/cni/net.d", "--cni-bin-dir=/opt/cni/bin", "--state-dir=/run/podwire",
		"--plugin="+env["PODWIRE_BIN"], "--mode=auto", "--config="+agentEntry(),
		"--health-addr=127.0.0.1:9765", "--startup-taint=podwire.io/agent-not-ready", "--startup-taint-effect=NoSchedule",
		"--unknown-interfaces=drop", "--log-format=text", "--log-level=info")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	a := &agent{node: n, cmd: cmd, relay: r, log: log}
	nsh, err := netns.GetFromPath(n.NetNS)
	if err != nil {
		a.stop()
		return nil, err
	}
	defer nsh.Close()
	if a.routes, err = netlinksafe.NewHandleAt(nsh); err != nil {
		a.stop()
		return nil, err
	}
	hc := cluster.HTTPClientIn(n.NetNS)
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		resp, err := hc.Get("http://127.0.0.1:9765/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return a, nil
			}
			err = fmt.Errorf("%s: %.300s", resp.Status, b)
		}
		if time.Now().After(end) || ctx.Err() != nil {
			a.stop()
			return nil, fmt.Errorf("agent of %s not ready within 2 minutes: %v", n.Name, err)
		}
	}
}

// stop ends the agent by its PID; a second call does nothing.
func (a *agent) stop() {
	if a.stopped {
		return
	}
	a.stopped = true
	endProcess(a.cmd, 15*time.Second)
	a.log.Close()
	if a.routes.Handle != nil {
		a.routes.Close()
	}
}

func (a *agent) pid() int { return a.cmd.Process.Pid }

// remoteRoutes is the node's ProtoRemote routes (forwarding.ProtoRemote,
// IPv4: the fake Nodes publish IPv4 prefixes), by destination.
func (a *agent) remoteRoutes() (map[netip.Prefix]bool, error) {
	rs, err := a.routes.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: 45, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Prefix]bool, len(rs))
	for _, r := range rs {
		if r.Dst == nil {
			continue
		}
		if a, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			ones, _ := r.Dst.Mask.Size()
			out[netip.PrefixFrom(a.Unmap(), ones)] = true
		}
	}
	return out, nil
}

// usage is a process's CPU time (user + system, its waited-for children
// included: the agent may run `podwire repair`) and RSS.
type usage struct {
	cpu time.Duration
	rss int64 // bytes
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times on Linux.
const clockTick = 100

func readUsage(pid int) (usage, error) {
	var u usage
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ticks int64
	for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime (fields 14-17)
		v, _ := strconv.ParseInt(f[k], 10, 64)
		ticks += v
	}
	u.cpu = time.Duration(ticks) * time.Second / clockTick
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, l := range strings.Split(string(st), "\n") {
		if fs := strings.Fields(l); len(fs) == 3 && fs[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(fs[1], 10, 64)
			u.rss = kb << 10
		}
	}
	return u, nil
}

// peakSampler samples pids' RSS every interval until stopped, keeping the
// peak of each.
type peakSampler struct {
	mu   sync.Mutex
	peak map[int]int64
	stop chan struct{}
	done chan struct{}
}

func samplePeaks(interval time.Duration, pids ...int) *peakSampler {
	s := &peakSampler{peak: map[int]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			for _, pid := range pids {
				if u, err := readUsage(pid); err == nil {
					s.mu.Lock()
					s.peak[pid] = max(s.peak[pid], u.rss)
					s.mu.Unlock()
				}
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// end stops the sampler and returns the peaks by PID.
func (s *peakSampler) end() map[int]int64 {
	close(s.stop)
	<-s.done
	return s.peak
}

// apiserverPID is the run's kube-apiserver: the process naming the run's
// audit log.
func apiserverPID() (int, error) {
	for _, pid := range cluster.ProcessesMentioning(c.AuditLog()) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == "kube-apiserver" {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no kube-apiserver process names %s", c.AuditLog())
}

// watchEvents is what the apiserver sent every watcher of Nodes, all
// watches together: bytes (apiserver_watch_events_sizes' sum) and events
// (apiserver_watch_events_total).
func watchEvents(ctx context.Context) (bytes, events float64, err error) {
	b, err := c.API(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, `{group="",resource="nodes",`) {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch {
		case strings.HasPrefix(l, "apiserver_watch_events_sizes_sum{"):
			bytes += v
		case strings.HasPrefix(l, "apiserver_watch_events_total{"):
			events += v
		}
	}
	return bytes, events, nil
}

// nodeWrites is the count of writes of Nodes' spec and metadata the
// apiserver has answered (apiserver_request_total, PATCH, PUT and POST of
// nodes without a subresource): the controller-manager's taints and
// labels of new Nodes among them, which every agent receives.
func nodeWrites(ctx context.Context) (float64, error) {
	b, err := c.API(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return 0, err
	}
	var n float64
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "apiserver_request_total{") || !strings.Contains(l, `resource="nodes"`) ||
			!strings.Contains(l, `subresource=""`) {
			continue
		}
		if !strings.Contains(l, `verb="PATCH"`) && !strings.Contains(l, `verb="PUT"`) && !strings.Contains(l, `verb="POST"`) {
			continue
		}
		if f := strings.Fields(l); len(f) == 2 {
			v, _ := strconv.ParseFloat(f[1], 64)
			n += v
		}
	}
	return n, nil
}

// waitQuiet waits until no Node has been written (nodeWrites) for 15 s:
// after the fleet grew, the controller-manager taints each new Node until
// kwok's first status makes it Ready and then takes the taint away, at its
// own pace, and every agent receives each of those writes.
func waitQuiet(ctx context.Context, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	last, err := nodeWrites(ctx)
	if err != nil {
		return err
	}
	quietSince := time.Now()
	for time.Since(quietSince) < 15*time.Second {
		if time.Now().After(end) {
			return fmt.Errorf("Nodes still written after %v", timeout)
		}
		time.Sleep(5 * time.Second)
		n, err := nodeWrites(ctx)
		if err != nil {
			return err
		}
		if n != last {
			last, quietSince = n, time.Now()
		}
	}
	return nil
}
