package bench

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/podwire/podwire/integration/cnitest"
	"github.com/podwire/podwire/internal/testns"
)

// arm is one chain measured: a primary (ptp, or the bridge plugin on cni0)
// with host-local, then the arm's chained plugins, on one node.
type arm struct {
	key  string
	n    *node
	args cnitest.PodArgs // namespace, annotations and capabilities of its pods
	list *libcni.NetworkConfigList
}

// armKeys are BenchmarkChain's arms (newArm; README.md says what each is).
var armKeys = []string{"A", "B", "C", "D", "E", "F", "G", "H", "I"}

// tuningEntry is arm C's entry, which BenchmarkDirect also runs directly.
var tuningEntry = map[string]any{"type": "tuning", "sysctl": map[string]string{"net.core.somaxconn": "1024"}}

// podwireEntry is podwire's entry on node n: source check, forwarding
// allowed in nf-*, the Azure probe SNAT and egress IPs on the uplink.
func podwireEntry(n *node, extra map[string]any) map[string]any {
	e := map[string]any{"sourceCheck": true, "forwarding": map[string]any{"namespaces": []string{"nf-*"}},
		"probeSNAT": map[string]any{"preset": "azure"},
		"egress":    map[string]any{"ips": []string{egressV4, egressV6}, "exceptCIDRs": []string{"10.0.0.0/8", "fd00::/8"}}}
	maps.Copy(e, extra)
	return cnitest.PodwireEntry(n.stateDir, filepath.Join(n.dir, "podwire.log"), e)
}

// newArm is arm key on node n, its pools 10.<subnet>/16 and fd00:<subnet>::/64,
// in the network name: arms of one name on a node share host-local's leases
// (whose cost grows with them), so that A and E pay host-local alike.
func newArm(b *testing.B, key string, n *node, subnet int, name string) *arm {
	a := &arm{key: key, n: n}
	var plugins []map[string]any
	switch key {
	case "B":
		plugins = append(plugins, map[string]any{"type": "passthrough"})
	case "C":
		plugins = append(plugins, tuningEntry)
	case "D": // one port mapping per pod; its pods are deleted one by one, so they may share it
		a.args.Capabilities = map[string]any{"portMappings": []map[string]any{{"hostPort": 20080, "containerPort": 80, "protocol": "tcp"}}}
		plugins = append(plugins, map[string]any{"type": "portmap", "backend": "nftables", "capabilities": map[string]bool{"portMappings": true}})
	case "E", "I":
		plugins = append(plugins, podwireEntry(n, nil))
	case "F":
		a.args = cnitest.PodArgs{Namespace: "nf-bench", Annotations: map[string]string{"podwire.io/forwarding": "true"}}
		plugins = append(plugins, podwireEntry(n, nil))
	case "G":
		a.args.Annotations = map[string]string{"podwire.io/vlan": "100"}
		plugins = append(plugins, podwireEntry(n, map[string]any{"allowedVLANs": "100"}))
	}
	ch := cnitest.Chain{Name: name, Version: "1.1.0", IPAMDir: filepath.Join(n.dir, "ipam"), DefaultRoutes: true, MTU: 1500,
		V4Pool: fmt.Sprintf("10.%d.0.0/16", subnet), V6Pool: fmt.Sprintf("fd00:%d::/64", subnet), Plugins: plugins}
	if key == "H" || key == "I" {
		ch.PrimaryEntry = map[string]any{"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true,
			"hairpinMode": true, "mtu": 1500, "ipam": map[string]any{"type": "host-local", "dataDir": ch.IPAMDir,
				"ranges": []any{[]any{map[string]string{"subnet": ch.V4Pool}}, []any{map[string]string{"subnet": ch.V6Pool}}}}}
	}
	var err error
	if a.list, err = ch.List(); err != nil {
		b.Fatal(err)
	}
	return a
}

// BenchmarkChain times ADD and DEL through libcni for every arm, each on a
// node of its own; a round makes one pod per arm (ADD, then DEL).
func BenchmarkChain(b *testing.B) {
	var arms []*arm
	for i, k := range armKeys {
		n := newNode(b, "chain-"+k)
		if k == "G" { // bridge VLAN filtering, which this kernel may lack: scripts/bench.sh then measures G in the VM
			probe := []byte("link add probe0 type bridge vlan_filtering 1\nlink del probe0\n")
			if _, err := n.run(exec.Command("ip", "-batch", "-"), probe); err != nil {
				continue
			}
		}
		arms = append(arms, newArm(b, k, n, 100+i, "bench-"+k))
	}
	rounds(b, len(arms), func(r, i int, s samples) error {
		add, del, err := arms[i].n.addDel(arms[i], r+1)
		s.put(arms[i].key+"-add", add)
		s.put(arms[i].key+"-del", del)
		return err
	})
}

// alone runs podwire (or bin) directly on a pod that arm a's chain made
// (untimed), as a runtime runs a plugin (CNI_* environment, the entry on
// stdin, the pod's result as ADD's prevResult), ADD then DEL, under the
// command line wrap (%v the verb) when it is not "": the process's own cost.
func (n *node) alone(bin string, a *arm, seq int, entry map[string]any, wrap string) (add, del cost, err error) {
	p, _, err := n.attach(a, seq)
	if err != nil {
		return add, del, err
	}
	defer testns.Release(p.NS)
	conf := maps.Clone(entry)
	delete(conf, "capabilities")
	conf["cniVersion"], conf["name"], conf["prevResult"] = "1.1.0", a.list.Name, p.Result
	conf["runtimeConfig"] = map[string]any{"io.kubernetes.cri.pod-annotations": p.RT.CapabilityArgs["io.kubernetes.cri.pod-annotations"]}
	var args []string
	for _, kv := range p.RT.Args {
		args = append(args, kv[0]+"="+kv[1])
	}
	plugin := func(verb string) (cost, error) {
		stdin, err := json.Marshal(conf)
		if err != nil {
			return cost{}, err
		}
		argv := append(strings.Fields(strings.ReplaceAll(wrap, "%v", verb)), bin)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = []string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + p.RT.ContainerID, "CNI_NETNS=" + p.RT.NetNS,
			"CNI_IFNAME=" + p.RT.IfName, "CNI_ARGS=" + strings.Join(args, ";"), "CNI_PATH=" + strings.Join(n.CNI.Path, ":"),
			"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		return n.run(cmd, stdin)
	}
	if add, err = plugin("ADD"); err == nil {
		delete(conf, "prevResult")
		del, err = plugin("DEL")
	}
	if derr := n.Del(a.list, p.RT); err == nil {
		err = derr
	}
	return add, del, err
}

// BenchmarkDirect runs podwire, passthrough, tuning (and BENCH_COMPARE, a
// second podwire binary) directly on pods made by ptp.
func BenchmarkDirect(b *testing.B) {
	n := newNode(b, "direct")
	a := newArm(b, "A", n, 150, "bench-direct")
	type plugin struct {
		name, bin string
		entry     map[string]any
	}
	plugins := []plugin{{"podwire", cnitest.PodwireBin(), podwireEntry(n, nil)},
		{"passthrough", filepath.Join(benchBin(), "passthrough"), map[string]any{"type": "passthrough"}},
		{"tuning", filepath.Join(cnitest.CNIBinDir(), "tuning"), tuningEntry}}
	if c := os.Getenv("BENCH_COMPARE"); c != "" {
		plugins = append(plugins, plugin{"compare", c, podwireEntry(n, nil)})
	}
	rounds(b, len(plugins), func(r, i int, s samples) error {
		p := plugins[i]
		add, del, err := n.alone(p.bin, a, r+1, p.entry, "")
		s.put(p.name+"-add", add)
		s.put(p.name+"-del", del)
		return err
	})
}

// BenchmarkStartup times the CNI VERSION verb (exec, package initialisation,
// one JSON line) of podwire and passthrough, and `podwire version`.
func BenchmarkStartup(b *testing.B) {
	cmds := []struct{ name, bin, arg string }{{"podwire", cnitest.PodwireBin(), ""},
		{"passthrough", filepath.Join(benchBin(), "passthrough"), ""}, {"cli", cnitest.PodwireBin(), "version"}}
	rounds(b, len(cmds), func(r, i int, s samples) error {
		c := cmds[i]
		cmd := exec.Command(c.bin)
		if c.arg != "" {
			cmd.Args = append(cmd.Args, c.arg)
		} else {
			cmd.Env = []string{"CNI_COMMAND=VERSION"}
		}
		v, err := run(cmd, []byte(`{"cniVersion":"1.1.0"}`))
		s.put(c.name, v)
		return err
	})
}
