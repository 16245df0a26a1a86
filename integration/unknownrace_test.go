package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// TestUnknownScanBeforeSlowAdd: a forwarding pod's ADD is slow: the
// primary has made its veth, and before podwire writes the record the
// unknown-interface scan (`podwire repair --drop-unknown`, what the agent
// runs with unknownInterfaces=drop once the veth has been unknown for its
// grace) checks the veth's sources, so that a source the node routes to
// it but does not own is dropped (shown). Then podwire's part of the ADD
// runs: the forwarding pod's forged source passes again, as every
// forwarding pod's does; before, the scan's check stayed for good.
func TestUnknownScanBeforeSlowAdd(t *testing.T) {
	n := newNode(t)
	primaryOnly, err := libcni.ConfListFromBytes(n.primaryList("1.1.0", nil))
	if err != nil {
		t.Fatal(err)
	}
	ann := map[string]string{"podwire.io/forwarding": "true"}
	u := n.mustAddPod(podSpec{namespace: "nf-a", name: "slow", annotations: ann, list: primaryOnly})
	be := n.newBackend()
	srv := listenTCP(t, be.ns, "[::]:0")
	dst := netip.AddrPortFrom(be.v4, srv.port())
	spoof := spoofSetup(t, n, u, false)
	if err := eventually(3*time.Second, func() error { return dialTCP(u.NS, spoof, dst, time.Second) }); err != nil {
		t.Fatalf("the pod's forged source %s before any check: %v (the test would prove nothing)", spoof, err)
	}

	list, err := n.Chain("1.1.0", fwdConfig).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	conflist := filepath.Join(n.Dir, "podwire.conflist")
	if err := os.WriteFile(conflist, list, 0o644); err != nil {
		t.Fatal(err)
	}
	n.Do(func() error {
		out, err := exec.Command(podwireBin, "repair", "--conflist", conflist, "--drop-unknown", u.hostIf()).CombinedOutput()
		if err != nil {
			return fmt.Errorf("podwire repair --drop-unknown: %v: %s", err, out)
		}
		return nil
	})
	if err := dialTCP(u.NS, spoof, dst, time.Second); err == nil {
		t.Fatalf("the scan did not check %s: the forged source %s passes", u.hostIf(), spoof)
	}

	// podwire's part of the ADD, with the primary's result.
	var entry map[string]any
	var l struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(list, &l); err != nil {
		t.Fatal(err)
	}
	entry = l.Plugins[len(l.Plugins)-1]
	entry["cniVersion"], entry["name"] = "1.1.0", "podwire-race"
	entry["prevResult"] = u.Result
	entry["runtimeConfig"] = map[string]any{"io.kubernetes.cri.pod-annotations": ann}
	stdin, err := json.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, kv := range u.RT.Args {
		args = append(args, kv[0]+"="+kv[1])
	}
	cni := func(command string) {
		t.Helper()
		n.Do(func() error {
			cmd := exec.Command(podwireBin)
			cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+u.RT.ContainerID, "CNI_NETNS="+u.NS.Path(),
				"CNI_IFNAME="+u.RT.IfName, "CNI_ARGS="+strings.Join(args, ";"), "CNI_PATH="+filepath.Dir(podwireBin))
			cmd.Stdin = bytes.NewReader(stdin)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("podwire %s: %v: %s", command, err, out)
			}
			return nil
		})
	}
	cni("ADD")
	t.Cleanup(func() { cni("DEL") })
	if err := eventually(3*time.Second, func() error { return dialTCP(u.NS, spoof, dst, time.Second) }); err != nil {
		t.Fatalf("the forwarding pod's source %s after its ADD: %v (the scan's check stayed)\nlog:\n%s", spoof, err, n.Log())
	}
}
