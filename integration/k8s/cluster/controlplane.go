package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// ControlPlaneIP is the address on the uplinks' segment (LinkPrefix) of a
// control plane run outside the nodes' host (StartControlPlane): the VM
// cluster's, on the VM's host.
var ControlPlaneIP = netip.MustParseAddr("10.99.0.250")

// ControlPlaneOptions configure StartControlPlane.
type ControlPlaneOptions struct {
	// K8sBinDir and EtcdBin are as in Options.
	K8sBinDir, EtcdBin string
	// Dir is where the control plane writes its CA (pki/), its apiserver's
	// URL (the file url), its data and its logs (logs/): what
	// Options.ControlPlane of the nodes' Start names.
	Dir string
	// IP is the address the apiserver serves and advertises on, one of the
	// caller's network namespace's (default ControlPlaneIP).
	IP netip.Addr
	// Logf reports progress (default: discard).
	Logf func(format string, args ...any)
}

// ControlPlane is etcd, the apiserver, the controller-manager and the
// scheduler of a cluster whose nodes run elsewhere.
type ControlPlane struct{ c *Cluster }

// StartControlPlane runs etcd, the apiserver, the controller-manager and
// the scheduler as children of the caller, in its namespaces, with o.Dir
// as their directory, and returns once the apiserver is ready. The nodes
// join from another host's Start with Options.ControlPlane set to what
// o.Dir holds, over a network on which o.IP reaches the uplinks' segment.
// Why: under TCG the control plane is the largest share of a VM cluster's load; on
// the VM's host it runs at native speed.
func StartControlPlane(ctx context.Context, o ControlPlaneOptions) (cp *ControlPlane, err error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if !o.IP.IsValid() {
		o.IP = ControlPlaneIP
	}
	if !LinkPrefix.Contains(o.IP) {
		return nil, fmt.Errorf("control plane address %s: want one in %s", o.IP, LinkPrefix)
	}
	c := &Cluster{opts: Options{K8sBinDir: o.K8sBinDir, EtcdBin: o.EtcdBin}, logf: o.Logf, Dir: o.Dir,
		AdminKubeconfig: filepath.Join(o.Dir, "admin.kubeconfig"), apiURL: apiServer}
	c.cp = &Node{c: c, Name: "control-plane", IP: o.IP}
	cp = &ControlPlane{c: c}
	defer func() {
		if err != nil {
			c.logf("control plane start failed: %v; logs in %s", err, filepath.Join(o.Dir, "logs"))
			cp.Stop()
		}
	}()
	start := time.Now()
	for _, d := range []string{"logs", "etcd", "flex", "apiserver-certs"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return cp, err
		}
	}
	if _, err := c.writeControlPlanePKI(); err != nil {
		return cp, err
	}
	if err := c.startEtcd(ctx); err != nil {
		return cp, err
	}
	if err := c.startAPIServer(ctx); err != nil {
		return cp, err
	}
	if err := c.startControllers(); err != nil {
		return cp, err
	}
	u := "https://" + netip.AddrPortFrom(o.IP, 6443).String()
	if err := os.WriteFile(filepath.Join(o.Dir, "url"), []byte(u+"\n"), 0o644); err != nil {
		return cp, err
	}
	c.logf("control plane %s ready in %.1fs", u, time.Since(start).Seconds())
	return cp, nil
}

// Stop ends the control plane's processes by PID, the controllers first.
func (cp *ControlPlane) Stop() error {
	c := cp.c
	var errs []error
	for _, p := range c.procs {
		if p.name == "kube-controller-manager" || p.name == "kube-scheduler" {
			errs = append(errs, c.end(p))
		}
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		errs = append(errs, c.end(c.procs[i]))
	}
	return errors.Join(errs...)
}

// readControlPlaneURL reads the url file of StartControlPlane's dir.
func readControlPlaneURL(dir string) (string, netip.Addr, error) {
	b, err := os.ReadFile(filepath.Join(dir, "url"))
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("the control plane's URL: %w", err)
	}
	raw := strings.TrimSpace(string(b))
	u, err := url.Parse(raw)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("the control plane's URL %q: %w", raw, err)
	}
	ip, err := netip.ParseAddr(u.Hostname())
	if err != nil || !LinkPrefix.Contains(ip) {
		return "", netip.Addr{}, fmt.Errorf("the control plane's URL %q: want an address in %s", raw, LinkPrefix)
	}
	return raw, ip, nil
}

// waitRemoteAPIServer waits for the apiserver of Options.ControlPlane to
// answer /readyz from the first node's netns, across the switch.
func (c *Cluster) waitRemoteAPIServer(ctx context.Context) error {
	var err error
	if c.api, err = c.apiClient(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	return c.wait(ctx, "the apiserver "+c.apiURL+" /readyz", nil, 500*time.Millisecond, func() error {
		return httpOK(c.api, c.apiURL+"/readyz")
	})
}

// plugControlPlaneNIC makes Options.ControlPlaneNIC a port of the switch.
func (c *Cluster) plugControlPlaneNIC() error {
	nic, err := netlinksafe.LinkByName(c.opts.ControlPlaneNIC)
	if err != nil {
		return fmt.Errorf("ControlPlaneNIC %q: %w", c.opts.ControlPlaneNIC, err)
	}
	sw, err := ns.GetNS(c.SwitchNetNS)
	if err != nil {
		return err
	}
	defer sw.Close()
	if err := netlink.LinkSetNsFd(nic, int(sw.Fd())); err != nil {
		return fmt.Errorf("failed to move %s into the switch's netns: %w", c.opts.ControlPlaneNIC, err)
	}
	return inNetNS(c.SwitchNetNS, func() error { return switchPort(c.opts.ControlPlaneNIC) })
}
