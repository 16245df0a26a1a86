package cluster

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/net/dns/dnsmessage"

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

// TestE2EDNSImagesRun unpacks the DNS specs' two prober images (agnhost's
// and glibc-dns-testing's) and runs in each, in a throwaway netns, the
// specs' probe commands through /bin/sh -c as they do (dns_common.go's
// createProbeCommand): dig over UDP and over TCP with the search path of
// resolv.conf against a DNS server in the netns, getent hosts of a name
// the pod's /etc/hosts holds, seq and sleep.
func TestE2EDNSImagesRun(t *testing.T) {
	k8sBin, _ := addonBins(t)
	netns := testns.New(t)
	serveDNS(t, netns, "probe.svc.example.", netip.MustParseAddr("192.0.2.53"))
	for _, im := range []struct {
		name  string
		build func(string) (v1.Image, error)
	}{
		{"agnhost", E2EAgnhostImage},
		{"glibc-dns-testing", func(string) (v1.Image, error) { return E2EGlibcDNSImage() }},
	} {
		t.Run(im.name, func(t *testing.T) {
			root, _ := unpacked(t, im.build, k8sBin)
			// What the kubelet mounts into a pod's containers.
			for name, content := range map[string]string{
				"etc/resolv.conf": "nameserver 127.0.0.1\nsearch ns.svc.example svc.example\noptions ndots:5\n",
				"etc/hosts":       "127.0.0.1 localhost\n10.244.1.7 dns-querier-1.dns-test-service.ns.svc.example dns-querier-1\n",
			} {
				if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Join(root, "results"), 0o755); err != nil {
				t.Fatal(err)
			}
			probe := `for i in $(seq 1 2); do ` +
				`check="$(dig +notcp +noall +answer +search probe A)" && test -n "$check" && echo "$check" > /results/udp;` +
				`check="$(dig +tcp +noall +answer +search probe A)" && test -n "$check" && echo "$check" > /results/tcp;` +
				`test -n "$(getent hosts dns-querier-1.dns-test-service.ns.svc.example)" && echo OK > /results/hosts;` +
				`sleep 0; done`
			chrootNS(t, netns, root, "/bin/sh", "-c", probe)
			for _, f := range []struct{ file, want string }{
				{"udp", "192.0.2.53"}, {"tcp", "192.0.2.53"}, {"hosts", "OK"},
			} {
				b, err := os.ReadFile(filepath.Join(root, "results", f.file))
				if err != nil {
					t.Errorf("%s probe wrote no result: %v", f.file, err)
					continue
				}
				wantOutput(t, f.file+" probe", string(b), f.want)
			}
		})
	}
}

// serveDNS answers, on 127.0.0.1:53 of netns over UDP and TCP, the A query
// of name with addr, and every other query with NXDOMAIN, until t ends.
func serveDNS(t *testing.T, netns ns.NetNS, name string, addr netip.Addr) {
	t.Helper()
	var udp net.PacketConn
	var tcp net.Listener
	if err := netns.Do(func(ns.NetNS) error {
		var err error
		if udp, err = net.ListenPacket("udp4", "127.0.0.1:53"); err != nil {
			return err
		}
		tcp, err = net.Listen("tcp4", "127.0.0.1:53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close(); tcp.Close() })
	answer := func(q []byte) []byte {
		var p dnsmessage.Parser
		h, err := p.Start(q)
		if err != nil {
			return nil
		}
		question, err := p.Question()
		if err != nil {
			return nil
		}
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: dnsmessage.RCodeNameError})
		found := question.Name.String() == name && question.Type == dnsmessage.TypeA
		if found {
			b = dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
		}
		_ = b.StartQuestions()
		_ = b.Question(question)
		if found {
			_ = b.StartAnswers()
			_ = b.AResource(dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 30}, dnsmessage.AResource{A: addr.As4()})
		}
		out, _ := b.Finish()
		return out
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = udp.WriteTo(answer(buf[:n]), from)
		}
	}()
	go func() {
		for {
			conn, err := tcp.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				for {
					var size [2]byte
					if _, err := io.ReadFull(conn, size[:]); err != nil {
						return
					}
					q := make([]byte, binary.BigEndian.Uint16(size[:]))
					if _, err := io.ReadFull(conn, q); err != nil {
						return
					}
					a := answer(q)
					if _, err := conn.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(a))), a...)); err != nil {
						return
					}
				}
			}()
		}
	}()
}
