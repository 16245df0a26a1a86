package cri

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// pod is a running sandbox as the test sees it.
type pod struct {
	id        string
	namespace string
	name      string
	netnsPath string       // /proc/PID/ns/net of the sandbox's pause process
	ips       []netip.Addr // from the CRI status, primary first
}

// runPod creates a sandbox and reads back its pid and addresses.
func (n *node) runPod(ctx context.Context, t *testing.T, namespace, name string, annotations map[string]string) (*pod, error) {
	t.Helper()
	start := time.Now()
	resp, err := n.runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: n.sandboxConfig(namespace, name, annotations)})
	if err != nil {
		return nil, err
	}
	t.Logf("RunPodSandbox %s/%s: %s in %v", namespace, name, resp.PodSandboxId[:12], time.Since(start).Round(time.Millisecond))
	st, err := n.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: resp.PodSandboxId, Verbose: true})
	if err != nil {
		t.Fatalf("PodSandboxStatus %s/%s: %v", namespace, name, err)
	}
	p := &pod{id: resp.PodSandboxId, namespace: namespace, name: name}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("no pid in the verbose status of %s/%s: %v %q", namespace, name, err, st.Info["info"])
	}
	p.netnsPath = fmt.Sprintf("/proc/%d/ns/net", info.Pid)
	if net := st.Status.GetNetwork(); net != nil {
		all := []string{net.Ip}
		for _, a := range net.AdditionalIps {
			all = append(all, a.Ip)
		}
		for _, s := range all {
			a, err := netip.ParseAddr(s)
			if err != nil {
				t.Fatalf("bad pod IP %q of %s/%s: %v", s, namespace, name, err)
			}
			p.ips = append(p.ips, a)
		}
	}
	return p, nil
}

// removePod stops and removes a sandbox (the CRI sends CNI DEL twice).
func (n *node) removePod(ctx context.Context, t *testing.T, p *pod) {
	t.Helper()
	if _, err := n.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.id}); err != nil {
		t.Fatalf("StopPodSandbox %s/%s: %v", p.namespace, p.name, err)
	}
	if _, err := n.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.id}); err != nil {
		t.Fatalf("RemovePodSandbox %s/%s: %v", p.namespace, p.name, err)
	}
}

// addr returns the pod's first address of the family of want.
func (p *pod) addr(v6 bool) (netip.Addr, bool) {
	for _, a := range p.ips {
		if a.Is6() == v6 {
			return a, true
		}
	}
	return netip.Addr{}, false
}
