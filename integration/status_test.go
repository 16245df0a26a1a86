package integration

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/utils/sysctl"
)

// TestStatusNeverTakesTheNodeDownForAnUplink: a runtime turns a STATUS
// error into NetworkReady=false for the whole node, so a missing VLAN
// uplink is only a warning. STATUS passes, an ordinary pod is added and
// passes packets, and only the ADD of a pod that needs a VLAN fails, naming
// the uplink.
func TestStatusNeverTakesTheNodeDownForAnUplink(t *testing.T) {
	n := newNode(t)
	keys := map[string]any{"uplink": "nope0", "allowedVLANs": "100-199"}
	list := n.conflist("1.1.0", keys)
	if err := n.status(list); err != nil {
		t.Fatalf("STATUS with the uplink missing: %v (want success: only VLAN pods need it)", err)
	}
	if !strings.Contains(n.Log(), `uplink \"nope0\" missing`) {
		t.Errorf("no uplink warning in the log:\n%s", n.Log())
	}
	a := n.mustAddPod(podSpec{version: "1.1.0", podwire: keys})
	b := n.mustAddPod(podSpec{version: "1.1.0", podwire: keys})
	srv := listenTCP(t, b.NS, netip.AddrPortFrom(b.v4, 0).String())
	if err := dialTCP(a.NS, a.v4, netip.AddrPortFrom(b.v4, srv.port()), 5*time.Second); err != nil {
		t.Fatalf("ordinary pods on a node without its uplink: %v", err)
	}
	_, err := n.addPod(podSpec{version: "1.1.0", podwire: keys, annotations: map[string]string{"podwire.io/vlan": "100"}})
	if err == nil || !strings.Contains(err.Error(), `"nope0"`) {
		t.Fatalf("ADD of a VLAN pod with the uplink missing: %v, want an error naming the uplink", err)
	}
	if got := len(n.records()); got != 2 {
		t.Fatalf("%d records after the refused VLAN pod, want the 2 ordinary pods'", got)
	}
}

// TestStatusUnavailableWhenStateDirUnwritable: STATUS fails with error 50
// when no ADD could record its attachment.
func TestStatusUnavailableWhenStateDirUnwritable(t *testing.T) {
	n := newNode(t)
	file := filepath.Join(n.Dir, "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	list := n.conflist("1.1.0", map[string]any{"stateDir": filepath.Join(file, "state")})
	err := n.status(list)
	if cniCode(err) != 50 || !strings.Contains(err.Error(), "stateDir") {
		t.Fatalf("STATUS with stateDir under a file: %v (code %d), want code 50 naming stateDir", err, cniCode(err))
	}
}

// TestStatusLogsOnlyChanges: kubelets poll STATUS every few seconds; it
// logs its warnings once per change and nothing while nothing changes.
func TestStatusLogsOnlyChanges(t *testing.T) {
	n := newNode(t)
	keys := map[string]any{"forwarding": map[string]any{"namespaces": []string{"nf-*"}}}
	list := n.conflist("1.1.0", keys)
	statusN := func(times int) {
		t.Helper()
		for i := 0; i < times; i++ {
			if err := n.status(list); err != nil {
				t.Fatalf("STATUS: %v", err)
			}
		}
	}
	statusN(3)
	if l := n.Log(); l != "" {
		t.Fatalf("STATUS logged with nothing to say:\n%s", l)
	}
	n.Do(func() error { _, err := sysctl.Sysctl("net.ipv4.conf.all.rp_filter", "1"); return err })
	statusN(5)
	if c := strings.Count(n.Log(), "rp_filter is 1"); c != 1 {
		t.Fatalf("rp_filter warning logged %d times over 5 STATUS calls, want once:\n%s", c, n.Log())
	}
	n.Do(func() error { _, err := sysctl.Sysctl("net.ipv4.conf.all.rp_filter", "0"); return err })
	statusN(3)
	if c := strings.Count(n.Log(), "warnings cleared"); c != 1 {
		t.Fatalf("clearing logged %d times, want once:\n%s", c, n.Log())
	}
}
