package cluster

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/podwire/podwire/internal/testns"
)

// TestE2EAgnhostImageRuns unpacks the e2e specs' agnhost image and, in a
// throwaway netns, runs its entrypoint as the specs' servers do (`netexec`
// on TCP and UDP), then from inside the image the specs' own client
// commands against it: curl to netexec's HTTP port and to its /dial
// (which makes netexec send the UDP request), and `nc -u` to its UDP port
// piped to grep, each through /bin/sh -c as the specs exec them.
func TestE2EAgnhostImageRuns(t *testing.T) {
	k8sBin, _ := addonBins(t)
	root, cfg := unpacked(t, E2EAgnhostImage, k8sBin)
	netns := testns.New(t)
	var server *exec.Cmd
	if err := netns.Do(func(ns.NetNS) error {
		server = exec.Command("chroot", append(append([]string{root}, cfg.Entrypoint...), "netexec", "--http-port=8080", "--udp-port=8081")...)
		return server.Start()
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = server.Process.Kill()
		_ = server.Wait()
	})
	sh := func(cmd string) (string, error) {
		var out []byte
		err := netns.Do(func(ns.NetNS) error {
			c := exec.Command("chroot", root, "/bin/sh", "-c", cmd)
			c.Env = []string{"PATH=" + imagePath}
			var err error
			out, err = c.CombinedOutput()
			return err
		})
		return string(out), err
	}
	// netexec is up when its HTTP port answers (curl fails until then).
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := sh("curl -g -q -s --connect-timeout 1 http://127.0.0.1:8080/hostName")
		if err == nil && strings.TrimSpace(out) != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("netexec never answered curl: %v: %s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, err := sh("curl -g -q -s 'http://127.0.0.1:8080/dial?request=hostname&protocol=udp&host=127.0.0.1&port=8081&tries=1'")
	if err != nil || !strings.Contains(out, `"responses":[`) {
		t.Errorf("curl of netexec's /dial over UDP: %v: %s", err, out)
	}
	if out, err := sh("cat /localhost.crt /localhost.key"); err != nil || !strings.Contains(out, "BEGIN CERTIFICATE") {
		t.Errorf("porter's certificate and key: %v: %s", err, out)
	}
	out, err = sh("echo hostName | nc -w 1 -u 127.0.0.1 8081 | grep -v '^\\s*$'")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Errorf("nc -u | grep to netexec's UDP port: %v: %q", err, out)
	}
}
