package integration

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

// TestUncheckedPrimaryWarns: on a macvlan primary the pod's interface has
// no host side, so neither source-check table can key on it. ADD works
// (podwire's other jobs still apply), CHECK passes, and the pod is named:
// in the ADD's log, in STATUS's warnings (logged once, STATUS still 0:
// other pods' ADDs are not affected) and in `podwire status` as UNCHECKED.
// After its DEL, STATUS logs that the warnings cleared and `podwire status`
// no longer names it.
func TestUncheckedPrimaryWarns(t *testing.T) {
	n := newNode(t)
	n.Do(func() error {
		return runAll([][]string{
			{"ip", "link", "add", "up0", "type", "veth", "peer", "name", "up0-peer"},
			{"ip", "link", "set", "up0-peer", "up"},
			{"ip", "link", "set", "up0", "up"},
		})
	})
	n.Base.PrimaryEntry = map[string]any{
		"type": "macvlan", "master": "up0", "mode": "bridge",
		"ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(n.Dir, "ipam"),
			"ranges": []any{[]any{map[string]string{"subnet": n.Base.V4Pool}}}},
	}
	list := n.conflist("1.1.0", nil)
	p := n.mustAddPod(podSpec{version: "1.1.0", name: "mv", list: list})
	if err := p.Check(); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	if err := n.status(list); err != nil {
		t.Fatalf("STATUS with an unchecked pod: %v (want 0: other pods' ADDs work)", err)
	}
	log := n.Log()
	for _, want := range []string{"the pod's source addresses cannot be checked", "is a macvlan", "STATUS: source addresses not checked: default/mv"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	conflist := n.writeConflist("1.1.0", nil)
	status := func() (warnings []string, flags string) {
		t.Helper()
		var out []byte
		if err := n.NS.Do(func(ns.NetNS) error {
			var err error
			out, err = exec.Command(podwireBin, "status", "--conflist", conflist, "--json").Output()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var st struct {
			Warnings    []string `json:"warnings"`
			Attachments []struct {
				Unchecked string `json:"unchecked"`
			} `json:"attachments"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, a := range st.Attachments {
			flags += a.Unchecked
		}
		return st.Warnings, flags
	}
	ws, unchecked := status()
	if !strings.Contains(strings.Join(ws, "\n"), "source addresses not checked: default/mv") || !strings.Contains(unchecked, "macvlan") {
		t.Errorf("podwire status: warnings %q, attachment %q", ws, unchecked)
	}

	if err := p.Del(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if err := n.status(list); err != nil {
		t.Fatalf("STATUS after DEL: %v", err)
	}
	if !strings.Contains(n.Log(), "STATUS: warnings cleared") {
		t.Errorf("STATUS did not log that the warnings cleared:\n%s", n.Log())
	}
	if ws, _ := status(); strings.Contains(strings.Join(ws, "\n"), "not checked") {
		t.Errorf("podwire status after DEL still warns: %q", ws)
	}
}
