package vlan

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/podwire/podwire/integration/k8s/cluster"
	"github.com/podwire/podwire/integration/packets"
)

// TestVLANAddressClaimAcrossNodes: a podwire.io/vlan-ips address is held
// for the whole cluster (the agents' ClaimPools), not for the node of its
// pod. A pod on node 2 asking for the address that a pod on node 1 holds
// on the same VLAN is refused: the PodwireRefused Event names the gate,
// the address and the holder with its node, and the kubelet's sandbox
// error is that refusal. The holder keeps reaching the client. Once the
// holder is deleted, a pod on node 2 asking for the same address is
// wired: the claim, not anything else of the request, is what refused it.
// The control, the same two pods wired on two nodes when claims are
// checked per node (claimScope "node"), is the VM suite's
// TestVLANAddressNodeScope: a helm upgrade to that scope and back costs
// minutes under TCG.
func TestVLANAddressClaimAcrossNodes(t *testing.T) {
	suite.Need(t)
	ensureNamespace(t, vlanNS)
	addr := netip.MustParseAddr("192.0.2.21")
	holder := runPod(t, vlanNS, "claim-holder", c.Nodes[0], vlanPod(100, addr))
	packets.EchoServer(t, clientNS.Path(), netip.AddrPortFrom(clientIP, echoPort))
	createPod(t, vlanNS, "claim-thief", c.Nodes[1], vlanPod(100, addr))
	refused, sandbox := refusedEvents(t, vlanNS, "claim-thief")
	for _, want := range []string{"podwire.io/vlan-ips", addr.String(), "one holder per VLAN address",
		vlanNS + "/claim-holder (node " + c.Nodes[0].Name + ")"} {
		if !strings.Contains(refused, want) {
			t.Errorf("the PodwireRefused Event does not say %q: %s", want, refused)
		}
	}
	refusal := refused[max(strings.Index(refused, "annotation "), 0):]
	for _, e := range sandbox {
		if !strings.Contains(e, refusal) {
			t.Errorf("the kubelet's sandbox error is not the refusal %q: %s", refusal, e)
		}
	}
	reaches(t, "the holder to the client after the refusal", holder.netns, clientIP)

	// The holder and the refused pod go; the address is free for a new
	// pod on node 2 (not the refused pod's next try: the kubelet spaces
	// its sandbox retries by a growing backoff).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, name := range []string{"claim-thief", "claim-holder"} {
		if err := deleteAndWait(ctx, vlanNS, name); err != nil {
			t.Fatal(err)
		}
	}
	runPod(t, vlanNS, "claim-freed", c.Nodes[1], vlanPod(100, addr))
	if !t.Failed() {
		t.Logf("PASS vlan-ips claim across nodes: %s held on %s is refused on %s naming the holder; freed, it is wired there",
			addr, c.Nodes[0].Name, c.Nodes[1].Name)
	}
}

// refusedEvents waits (90 s) for the PodwireRefused Event of the agent and
// the kubelet's FailedCreatePodSandBox on the pod namespace/name, and
// returns their messages.
func refusedEvents(t *testing.T, namespace, name string) (refused string, sandbox []string) {
	t.Helper()
	var list struct {
		Items []cluster.PodEvent `json:"items"`
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b, err := api(ctx, "GET", "/api/v1/namespaces/"+namespace+"/events?fieldSelector=involvedObject.name%3D"+name, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		if refused, sandbox, ok := cluster.Refusal(list.Items); ok {
			return refused, sandbox
		}
		if time.Now().After(deadline) {
			desc, _ := c.Kubectl(context.Background(), "", "describe", "pod", "-n", namespace, name)
			t.Fatalf("no PodwireRefused Event and FailedCreatePodSandBox on %s/%s within 90 s:\n%s", namespace, name, desc)
		}
		time.Sleep(time.Second)
	}
}
