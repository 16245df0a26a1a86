package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/noderepair"
	"github.com/podwire/podwire/pkg/ruleset"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
)

// TestRepeatedAddRefusesUnreadableRecord: a repeated ADD whose existing
// record this podwire cannot read (a newer podwire's schema) fails, naming
// the record and why, and leaves the record as it was: overwriting it
// would strand what it describes. (The pod claims nothing, so no read of
// the other records' claims stands in the way.)
func TestRepeatedAddRefusesUnreadableRecord(t *testing.T) {
	n := newTestNode(t)
	n.wire(ordinary)
	if _, err := n.add("1.0.0", ordinary); err != nil {
		t.Fatalf("first ADD: %v", err)
	}
	path := filepath.Join(n.dir, ordinary.id+"_eth0.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	rec["version"] = state.RecordVersion + 1
	rec["futureField"] = "what only a newer podwire undoes"
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = n.add("1.0.0", ordinary)
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrInternal || !strings.Contains(err.Error(), ordinary.id+"/eth0") ||
		!strings.Contains(e.Details, "schema version 3") {
		t.Fatalf("repeated ADD over a newer record: %v, want CNI error 999 naming %s/eth0 and the record's schema version", err, ordinary.id)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
		t.Errorf("the record was changed by the refused ADD:\n%s\nwant\n%s", after, b)
	}
}

// TestAddForgetsUnknownInterface: the unknown-interface scan (repair
// --drop-unknown) checks the sources of a host veth that has no record
// yet, holding the node lock, while a slow ADD of a forwarding pod on that
// veth is about to write its first record. The ADD waits for the lock to
// write it, then takes the veth out of the checked interfaces: the
// forwarding pod's port ends unchecked, and the next scan (which sees the
// record) leaves it so. The pod claims no route, so nothing else would
// make its ADD take the lock.
func TestAddForgetsUnknownInterface(t *testing.T) {
	forwarder := testPod{id: "c-fwd", ns: "nf-a", name: "fwd", hostIf: "veth-fwd", ip4: "10.199.0.8",
		ann: map[string]string{"podwire.io/forwarding": "true"}}
	n := newTestNode(t)
	n.wire(ordinary)
	n.wire(forwarder)
	// An ordinary pod first lays down the tables the scan adds to.
	if _, err := n.add("1.0.0", ordinary); err != nil {
		t.Fatalf("ADD of the ordinary pod: %v", err)
	}
	conf, err := config.Parse(n.conf("1.0.0", testPod{}, false, nil))
	if err != nil {
		t.Fatal(err)
	}
	unknown := cliapi.UnknownInterface{Name: forwarder.hostIf, Addresses: []netip.Addr{netip.MustParseAddr(forwarder.ip4)}, Dropped: true}
	dropped := nft.Elements{}
	noderepair.AddUnknownElements(dropped, unknown)

	// The scan holds the node lock.
	unlock, err := state.New(n.dir).Lock()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := n.add("1.0.0", forwarder); done <- err }()
	time.Sleep(300 * time.Millisecond)
	if r, _ := state.New(n.dir).Get(forwarder.id, "eth0"); r != nil {
		t.Errorf("the ADD wrote its record while the scan held the node lock")
	}
	// The scan found no record for the veth: it checks its sources.
	if err := nft.AddElements(n.nft, ruleset.Tables(conf, n.links.tablesEnv(conf)), dropped); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal([]cliapi.UnknownInterface{unknown})
	if err := os.WriteFile(filepath.Join(n.dir, noderepair.UnknownFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ADD of the forwarding pod: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ADD still waiting 10 s after the node lock was released")
	}
	if got := present(n.nft, nft.Elements{sourcecheck.ID: dropped[sourcecheck.ID]}); count(got) > 0 {
		t.Errorf("the forwarding pod's veth %s is still checked as an unknown interface: %v", forwarder.hostIf, got)
	}
	if b, err := os.ReadFile(filepath.Join(n.dir, noderepair.UnknownFile)); err != nil || strings.Contains(string(b), forwarder.hostIf) {
		t.Errorf("%s after the ADD: %q, %v; want it without %s", noderepair.UnknownFile, b, err, forwarder.hostIf)
	}
	if err := n.check("1.0.0", forwarder); err != nil {
		t.Errorf("CHECK of the forwarding pod: %v", err)
	}
}
