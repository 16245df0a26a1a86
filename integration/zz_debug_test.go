package integration

import (
	"os/exec"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

func TestZZDebugRuleset(t *testing.T) {
	n := newNode(t)
	n.mustAddPod(podSpec{namespace: "nf-a", annotations: map[string]string{"podwire.io/allowed-source-prefixes": "10.0.0.0/8,10.1.0.0/16,2001:db8::/32"}, podwire: map[string]any{"forwarding": map[string]any{"namespaces": []string{"nf-*"}}}})
	n.mustAddPod(podSpec{})
	_ = n.ns.Do(func(ns.NetNS) error {
		out, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
		t.Logf("%s %v", out, err)
		return nil
	})
}
