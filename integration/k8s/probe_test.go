package k8s

import (
	"net/netip"
	"testing"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

// TestProbeSNAT (single-stack IPv6 leg): the health probe, a TCP handshake
// from fe80::1234:5678:9abc on the outside network's uplink, reaches a pod's
// address through the node and is answered: podwire's probe SNAT gives it
// the routable source 2603:1062:0:1:fe80:1234:5678:9abc before routing (the
// kernel forwards nothing from a link-local source) and turns the answer's
// destination back after routing. The control is the same probe on the
// same path from fe80::4321, which no pair rewrites: unanswered. The IPv4
// legs configure no probe pair (the preset is IPv6) and skip, saying so.
func TestProbeSNAT(t *testing.T) {
	needCluster(t)
	if !c.IPv6Only() {
		t.Skip("the Azure probe pair is IPv6: this runs on the single-stack IPv6 leg")
	}
	const port = 8080
	p := runPod(t, "default", "probe-target", nil)
	dst := netip.AddrPortFrom(p.ip, port)
	control, probe := c.ProbeHandshakes(t, p.netns, dst)
	if control {
		t.Fatalf("control: the probe from %s (no pair) to %s was answered, so the node forwards link-local sources and this test proves nothing", cluster.UnpairedLinkLocal, dst)
	}
	if !probe {
		t.Fatalf("the probe from %s to %s was not answered with probeSNAT (preset azure) on:\n%s", cluster.AzureProbe, dst, nodeRuleset(t))
	}
	t.Logf("probe from %s to pod %s answered; from %s (no pair) unanswered", cluster.AzureProbe, dst, cluster.UnpairedLinkLocal)
}
