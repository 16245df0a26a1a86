package nodetables

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/config"
)

// TestNodeEgressFile: the agent's write is what the plugin reads; an
// unchanged annotation is not rewritten; with no file an ADD with
// egress.nodeAnnotation is CNI error 11, and without the key nothing is
// needed.
func TestNodeEgressFile(t *testing.T) {
	conf, err := config.Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"podwire","stateDir":"` + t.TempDir() +
		`","egress":{"nodeAnnotation":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	var e *types.Error
	if err := ReadEnv(conf).NodeEgressErr; !errors.As(err, &e) || e.Code != types.ErrTryAgainLater {
		t.Fatalf("no file yet: %v, want CNI error 11", err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if changed, err := WriteNodeEgress(conf.StateDir, "worker-1", "203.0.113.10, 2001:db8::10,203.0.113.11", true, t0); err != nil || !changed {
		t.Fatalf("first write: changed %v err %v", changed, err)
	}
	if err := ReadEnv(conf).NodeEgressErr; err != nil {
		t.Fatalf("after the agent's write: %v", err)
	}
	env := ReadEnv(conf)
	if env.Egress4 != netip.MustParseAddr("203.0.113.10") || env.Egress6 != netip.MustParseAddr("2001:db8::10") {
		t.Fatalf("egress IPs read back by the plugin: %v %v", env.Egress4, env.Egress6)
	}
	if changed, _ := WriteNodeEgress(conf.StateDir, "worker-1", "203.0.113.10, 2001:db8::10,203.0.113.11", true, t0.Add(time.Hour)); changed {
		t.Error("an unchanged annotation was rewritten")
	}
	if changed, _ := WriteNodeEgress(conf.StateDir, "worker-1", "", false, t0); !changed {
		t.Error("a removed annotation was not written")
	}
	if env := ReadEnv(conf); env.Egress4.IsValid() || env.Egress6.IsValid() {
		t.Errorf("egress IPs after the annotation went: %v %v", env.Egress4, env.Egress6)
	}
	off, _ := config.Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"podwire","stateDir":"` + t.TempDir() + `"}`))
	if err := ReadEnv(off).NodeEgressErr; err != nil {
		t.Errorf("without egress.nodeAnnotation: %v", err)
	}
}
