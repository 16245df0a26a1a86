package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"

	"github.com/podwire/podwire/internal/testns"
	"github.com/podwire/podwire/pkg/nodetables"
)

// BenchmarkNodeTablesADD times one podwire ADD (the binary alone, with a
// prevResult, as the runtime runs it after ptp) with probe SNAT and egress
// configured:
//
//   - first: no podwire table on the node (every one deleted before each ADD,
//     untimed): the ADD takes the node lock and lays all tables down;
//   - steady: the tables are current: one chain dump, then the pod's elements.
//
// Each ADD is followed by an untimed DEL. Run with
// `go -C integration test -run '^$' -bench NodeTables -benchtime 200x .`.
func BenchmarkNodeTablesADD(b *testing.B) {
	nodeNS := testns.New(b)
	podNS := testns.New(b)
	dir := b.TempDir()
	err := nodeNS.Do(func(ns.NetNS) error {
		for _, c := range [][]string{
			{"link", "set", "lo", "up"},
			{"link", "add", "vethbench", "type", "veth", "peer", "name", "eth0", "netns", filepath.Base(podNS.Path())},
			{"link", "set", "vethbench", "up"},
			{"link", "add", "uplink0", "type", "veth", "peer", "name", "uplink0p"},
			{"link", "set", "uplink0", "up"},
			{"addr", "add", "2001:db8:1::2/64", "dev", "uplink0", "nodad"},
			{"-6", "route", "add", "default", "via", "2001:db8:1::1", "dev", "uplink0"},
			{"addr", "add", "203.0.113.10/32", "dev", "uplink0"},
		} {
			if err := run("ip", c...); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = podNS.Do(func(ns.NetNS) error {
			for _, c := range [][]string{
				{"link", "set", "lo", "up"},
				{"link", "set", "eth0", "up"},
				{"addr", "add", "10.244.1.2/24", "dev", "eth0"},
				{"addr", "add", "fd00:244:1::2/64", "dev", "eth0", "nodad"},
			} {
				if err := run("ip", c...); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		b.Fatal(err)
	}
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": "podwire-bench", "type": "podwire",
		"stateDir": filepath.Join(dir, "state"), "logFile": filepath.Join(dir, "podwire.log"),
		"probeSNAT": map[string]any{"preset": "azure"},
		"egress":    map[string]any{"ips": []string{"203.0.113.10"}, "exceptCIDRs": []string{"10.244.0.0/16", "fd00:244::/32"}},
		"prevResult": map[string]any{
			"cniVersion": "1.0.0",
			"interfaces": []any{
				map[string]any{"name": "vethbench"},
				map[string]any{"name": "eth0", "sandbox": podNS.Path()},
			},
			"ips": []any{
				map[string]any{"address": "10.244.1.2/24", "interface": 1},
				map[string]any{"address": "fd00:244:1::2/64", "interface": 1},
			},
		},
	}
	stdin, err := json.Marshal(conf)
	if err != nil {
		b.Fatal(err)
	}
	exec1 := func(cmd, id string) error {
		return nodeNS.Do(func(ns.NetNS) error {
			c := exec.Command(podwireBin)
			c.Stdin = bytes.NewReader(stdin)
			c.Env = append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+id, "CNI_NETNS="+podNS.Path(),
				"CNI_IFNAME=eth0", "CNI_PATH="+filepath.Dir(podwireBin),
				"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=p")
			var out bytes.Buffer
			c.Stdout, c.Stderr = &out, &out
			if err := c.Run(); err != nil {
				return fmt.Errorf("%s: %v: %s", cmd, err, out.String())
			}
			return nil
		})
	}
	removeAll := func() {
		c, err := nftables.New(nftables.WithNetNSFd(int(nodeNS.Fd())))
		if err == nil {
			_, err = nodetables.RemoveAll(c)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	// Warm up: page cache, first tables.
	if err := exec1("ADD", "warm"); err != nil {
		b.Fatal(err)
	}
	if err := exec1("DEL", "warm"); err != nil {
		b.Fatal(err)
	}
	for _, first := range []bool{true, false} {
		name := map[bool]string{true: "first", false: "steady"}[first]
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				id := fmt.Sprintf("%s%d", name, i)
				b.StopTimer()
				if first {
					removeAll()
				}
				b.StartTimer()
				if err := exec1("ADD", id); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := exec1("DEL", id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
