package install

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/internal/testns"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// inNodeNS runs f in a throwaway network namespace: the tables, bridge and
// links it makes vanish with it.
func inNodeNS(t *testing.T, f func()) {
	t.Helper()
	nodeNS := testns.New(t)
	if err := nodeNS.Do(func(ns.NetNS) error { f(); return nil }); err != nil {
		t.Fatal(err)
	}
}

func addLink(t *testing.T, l netlink.Link, master *netlink.Bridge, alias string) {
	t.Helper()
	if err := netlink.LinkAdd(l); err != nil {
		t.Fatalf("failed to add %s: %v", l.Attrs().Name, err)
	}
	if alias != "" {
		if err := netlink.LinkSetAlias(l, alias); err != nil {
			t.Fatal(err)
		}
	}
	if master != nil {
		if err := netlink.LinkSetMaster(l, master); err != nil {
			t.Fatal(err)
		}
	}
}

func tableNames(t *testing.T) []string {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tb := range tables {
		names = append(names, tb.Name)
	}
	sort.Strings(names)
	return names
}

func TestRemoveNode(t *testing.T) {
	inNodeNS(t, func() {
		c, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range []*nftables.Table{
			{Family: nftables.TableFamilyINet, Name: "podwire"},
			{Family: nftables.TableFamilyIPv6, Name: "podwire-probe-snat"},
			{Family: nftables.TableFamilyINet, Name: "kube-proxy"},
		} {
			c.AddTable(tb)
		}
		if err := c.Flush(); err != nil {
			t.Fatalf("failed to add tables: %v", err)
		}
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "pwtest0"}}
		addLink(t, br, nil, vlanbridge.Alias)
		addLink(t, &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink0"}, PeerName: "wire0"}, br, "")
		port := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "pwvtest"}, PeerName: "pwvpeer"}
		addLink(t, port, br, "")
		foreign := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0"}}
		addLink(t, foreign, nil, "")

		stateDir := filepath.Join(t.TempDir(), "state")
		store := state.New(stateDir)
		rec := &state.Record{ContainerID: "c1", IfName: "eth0", PodNamespace: "nf-a", PodName: "router"}
		if err := store.Put(rec); err != nil {
			t.Fatal(err)
		}

		// Refused while a pod is recorded, naming it; nothing changes.
		_, err = RemoveNode(NodeOptions{StateDir: stateDir, Bridge: "pwtest0", Uplink: "uplink0"})
		if err == nil || !strings.Contains(err.Error(), "nf-a/router") || !strings.Contains(err.Error(), "--force") {
			t.Fatalf("want refusal naming nf-a/router, got %v", err)
		}
		if got := strings.Join(tableNames(t), ","); got != "kube-proxy,podwire,podwire-probe-snat" {
			t.Fatalf("refused removal changed tables: %s", got)
		}

		// The pod is gone but its veth is still a port: tables and state
		// go, the bridge stays and says why.
		if err := store.Delete("c1", "eth0"); err != nil {
			t.Fatal(err)
		}
		res, err := RemoveNode(NodeOptions{StateDir: stateDir, Bridge: "pwtest0", Uplink: "uplink0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tables) != 2 || res.Bridge != "" || len(res.Kept) != 1 || !strings.Contains(res.Kept[0], "pwvtest") || res.StateDir != stateDir {
			t.Fatalf("first removal: %+v", res)
		}
		if got := strings.Join(tableNames(t), ","); got != "kube-proxy" {
			t.Errorf("tables after removal: %s, want only kube-proxy", got)
		}
		if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
			t.Errorf("state dir still there: %v", err)
		}

		// Without ports the bridge goes; the uplink is released, not deleted.
		if err := netlink.LinkDel(port); err != nil {
			t.Fatal(err)
		}
		if res, err = RemoveNode(NodeOptions{StateDir: stateDir, Bridge: "pwtest0", Uplink: "uplink0"}); err != nil {
			t.Fatal(err)
		}
		if res.Bridge != "pwtest0" || res.Uplink != "uplink0" || len(res.Tables) != 0 {
			t.Fatalf("second removal: %+v", res)
		}
		if _, err := netlinksafe.LinkByName("pwtest0"); err == nil {
			t.Errorf("bridge pwtest0 still there")
		}
		up, err := netlinksafe.LinkByName("uplink0")
		if err != nil || up.Attrs().MasterIndex != 0 {
			t.Errorf("uplink0 not released: %v", err)
		}

		// A bridge that is not ours is never deleted.
		if res, err = RemoveNode(NodeOptions{StateDir: stateDir, Bridge: "cni0"}); err != nil {
			t.Fatal(err)
		}
		if res.Bridge != "" || len(res.Kept) != 1 {
			t.Errorf("foreign bridge: %+v", res)
		}
		if _, err := netlinksafe.LinkByName("cni0"); err != nil {
			t.Errorf("foreign bridge cni0 removed: %v", err)
		}

		// Nothing left: a no-op.
		if res, err = RemoveNode(NodeOptions{StateDir: stateDir, Bridge: "pwtest0", Uplink: "uplink0"}); err != nil || len(res.Tables)+len(res.Kept) != 0 || res.Bridge != "" || res.StateDir != "" {
			t.Errorf("third removal: %+v %v", res, err)
		}
	})
}

// TestRemoveNodeLocksBeforeChecking: RemoveNode reads the records under
// the node lock. An ADD that holds the lock and writes its pod's record
// while RemoveNode waits for it is seen: RemoveNode refuses, naming the
// pod, and removes nothing (its tables and record stay).
func TestRemoveNodeLocksBeforeChecking(t *testing.T) {
	nodeNS := testns.New(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	store := state.New(stateDir)
	if err := nodeNS.Do(func(ns.NetNS) error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "podwire"})
		return c.Flush()
	}); err != nil {
		t.Fatal(err)
	}
	// The ADD takes the node lock first.
	unlock, err := store.Lock()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		// A goroutine of its own thread, in the node's netns.
		done <- nodeNS.Do(func(ns.NetNS) error {
			_, err := RemoveNode(NodeOptions{StateDir: stateDir})
			return err
		})
	}()
	// Long enough for RemoveNode to have read the records if it did so
	// before taking the lock.
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("RemoveNode returned while the node lock was held: %v", err)
	default:
	}
	rec := &state.Record{ContainerID: "c1", IfName: "eth0", PodNamespace: "nf-a", PodName: "router"}
	if err := store.Put(rec); err != nil {
		t.Fatal(err)
	}
	unlock()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "nf-a/router") {
		t.Fatalf("RemoveNode after an ADD wrote its record under the lock: %v, want a refusal naming nf-a/router", err)
	}
	if r, err := store.Get("c1", "eth0"); err != nil || r == nil {
		t.Errorf("the pod's record after the refusal: %v, %v", r, err)
	}
	if err := nodeNS.Do(func(ns.NetNS) error {
		if got := strings.Join(tableNames(t), ","); got != "podwire" {
			t.Errorf("tables after the refusal: %q, want podwire kept", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
