package vm

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/integration/cnitest"
)

// TestNetlinkChurnVLAN is the VLAN twin of integration's TestNetlinkChurn
// (the VLAN paths need bridge VLAN filtering): VLAN pods with static
// addresses are added, reached, checked and deleted through libcni while a
// goroutine adds and removes veth pairs, addresses and routes in the node
// netns, whose link and address dumps span several netlink messages. ADD
// reads the uplink's addresses (a dump of every address of the node: the
// "failed to list addresses of uplink" of TestUplinkVLANsExactUnderConcurrency
// was its ErrDumpInterrupted), the bridge's VLANs and the port's addresses.
// Without netlinksafe the ADDs fail with "results may be incomplete or
// inconsistent".
func TestNetlinkChurnVLAN(t *testing.T) {
	require(t, capVLANFiltering)
	n := newNode(t, vlanConf(nil))
	addUplink(t, n, "uplink0")
	n.Do(func() error { return cnitest.ChurnBase(60, 1000) })

	var ops atomic.Int64
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- n.NS.Do(func(ns.NetNS) error {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return nil
				default:
				}
				if err := churnOnce(i, &ops); err != nil {
					return err
				}
			}
		})
	}()
	stopped := false
	stopChurn := func() error {
		if stopped {
			return nil
		}
		stopped = true
		close(stop)
		return <-done
	}
	t.Cleanup(func() { _ = stopChurn() })

	const rounds = 5
	for r := range rounds {
		// Two pods on VLAN 100 and one on 101, all in 192.0.2.0/24: the
		// VLAN 100 pods reach each other, not the VLAN 101 one.
		var pods []*cnitest.Pod
		for k, vid := range []int{100, 100, 101} {
			ip := fmt.Sprintf("192.0.2.%d", 10*r+k+1)
			p, err := n.addPod(map[string]string{"podwire.io/vlan": fmt.Sprint(vid), "podwire.io/vlan-ips": ip + "/24"})
			if err != nil {
				t.Fatalf("round %d: ADD of a VLAN %d pod under churn (%d churn operations so far): %v\nlog:\n%s",
					r, vid, ops.Load(), err, n.Log())
			}
			pods = append(pods, p)
		}
		mustPing(t, pods[0].NS, fmt.Sprintf("round %d: VLAN 100 pod to VLAN 100 pod under churn", r), fmt.Sprintf("192.0.2.%d", 10*r+2))
		mustNotPing(t, pods[0].NS, fmt.Sprintf("round %d: VLAN 100 pod to VLAN 101 pod", r), fmt.Sprintf("192.0.2.%d", 10*r+3))
		for k, p := range pods {
			if err := p.CheckLast(); err != nil {
				t.Fatalf("round %d: CHECK of pod %d under churn: %v", r, k, err)
			}
		}
		for k, p := range pods {
			if err := p.Del(); err != nil {
				t.Fatalf("round %d: DEL of pod %d under churn: %v", r, k, err)
			}
		}
		if got := uplinkVLANs(t, n); len(got) != 0 {
			t.Fatalf("round %d: after every DEL uplink0 carries %v, want none", r, got)
		}
		if left := n.leftovers(); len(left) > 0 {
			t.Fatalf("round %d: left after every DEL: %v", r, left)
		}
	}
	if err := stopChurn(); err != nil {
		t.Fatalf("churn goroutine: %v", err)
	}
	if ops.Load() < 50 {
		t.Fatalf("only %d churn operations ran: the test did not churn", ops.Load())
	}
	t.Logf("%d VLAN pods added, reached, checked and deleted while %d link/address/route changes ran", rounds*3, ops.Load())
}

// churnOnce is one cnitest.ChurnOnce in the calling netns, counted in ops.
func churnOnce(i int, ops *atomic.Int64) error {
	n, err := cnitest.ChurnOnce(i)
	ops.Add(int64(n))
	return err
}
