package integration

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/podwire/podwire/pkg/nft"
)

// relConf is the podwire entry shared by every pod of the reliability,
// crash and drift tests: the source check on (default), forwarding allowed
// in nf-* with routes inside 198.51.100.0/24. One config per node, so that
// no ADD sees a config change and rebuilds the tables.
func relConf() map[string]any {
	return map[string]any{"forwarding": map[string]any{
		"namespaces":       []string{"nf-*"},
		"routablePrefixes": []string{"198.51.100.0/24"},
	}}
}

// relSpec is pod i: every third pod (i%3 == 0) is a forwarding pod in
// namespace nf-rel with the route 198.51.100.i/32; the others are ordinary
// pods in "default". i must be below 256.
func relSpec(i int) podSpec {
	s := podSpec{name: fmt.Sprintf("rel-%d", i), podwire: relConf()}
	if i%3 == 0 {
		s.namespace = "nf-rel"
		s.annotations = map[string]string{
			"podwire.io/forwarding": "true",
			"podwire.io/routes":     relRoute(i).String(),
		}
	}
	return s
}

func relRoute(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 32)
}

// relSets are the sets of "inet podwire".
var relSets = []string{"checked", "pod-v4", "pod-v6", "allowed-v4", "allowed-v6"}

// relPod is a live pod of a reliability test and whether it forwards.
type relPod struct {
	p   *pod
	i   int
	fwd bool
	// routeGone: the pod's route went with its deleted veth (drift tests).
	routeGone bool
}

// relWant is what "inet podwire" must hold for the live pods: for each
// ordinary pod its host veth in "checked" and host veth . address in
// pod-v4/pod-v6; nothing for forwarding pods. Keys are hex.
func relWant(pods []relPod) map[string][]string {
	want := map[string][]string{}
	for _, rp := range pods {
		if rp.fwd {
			continue
		}
		host := rp.p.hostIf()
		ifk := nft.IfNameKey(host)
		want["checked"] = append(want["checked"], hex.EncodeToString(ifk))
		want["pod-v4"] = append(want["pod-v4"], hex.EncodeToString(nft.Concat(ifk, nft.AddrKey(rp.p.v4))))
		want["pod-v6"] = append(want["pod-v6"], hex.EncodeToString(nft.Concat(ifk, nft.AddrKey(rp.p.v6))))
	}
	for _, s := range relSets {
		sort.Strings(want[s])
	}
	return want
}

// relHave reads the sets of "inet podwire" in the node netns (google/nftables
// over netlink). Interval end markers are skipped.
func relHave(n *node) map[string][]string {
	have := map[string][]string{}
	for _, s := range relSets {
		for _, e := range n.setElements(s) {
			if e.IntervalEnd {
				continue
			}
			have[s] = append(have[s], hex.EncodeToString(e.Key))
		}
		sort.Strings(have[s])
	}
	return have
}

// relDiff names every missing, extra and duplicate element per set.
func relDiff(want, have map[string][]string) []string {
	var out []string
	for _, s := range relSets {
		w := map[string]int{}
		for _, k := range want[s] {
			w[k]++
		}
		h := map[string]int{}
		for _, k := range have[s] {
			h[k]++
		}
		for k, c := range h {
			switch {
			case c > 1:
				out = append(out, fmt.Sprintf("set %s: element %s %d times", s, k, c))
			case w[k] == 0:
				out = append(out, fmt.Sprintf("set %s: extra element %s", s, k))
			}
		}
		for k := range w {
			if h[k] == 0 {
				out = append(out, fmt.Sprintf("set %s: missing element %s", s, k))
			}
		}
	}
	sort.Strings(out)
	return out
}

// relAssertNode checks the node against the live pods: exact set elements,
// one complete record per live pod and no other, a route per live forwarding
// pod and none for gone ones, no leftover temporary state file, lock free.
func relAssertNode(t *testing.T, n *node, live []relPod, gone []int) {
	t.Helper()
	if d := relDiff(relWant(live), relHave(n)); len(d) > 0 {
		if len(d) > 20 {
			d = append(d[:20], fmt.Sprintf("... %d more", len(d)-20))
		}
		t.Errorf("inet podwire does not match the %d live pods:\n%s", len(live), strings.Join(d, "\n"))
	}
	wantRecs := map[string]bool{}
	for _, rp := range live {
		wantRecs[rp.p.RT.ContainerID+"_"+rp.p.RT.IfName+".json"] = true
	}
	recs := n.records()
	if len(recs) != len(wantRecs) {
		t.Errorf("%d state records, want %d (one per live pod)", len(recs), len(wantRecs))
	}
	for _, r := range recs {
		if !wantRecs[r] {
			t.Errorf("state record %s of no live pod", r)
		}
	}
	for _, rp := range live {
		if !rp.fwd || rp.routeGone {
			continue
		}
		if rs := n.nodeRoutes(relRoute(rp.i)); len(rs) != 1 {
			t.Errorf("forwarding pod %d: %d node routes to %s, want 1", rp.i, len(rs), relRoute(rp.i))
		}
	}
	for _, i := range gone {
		if rs := n.nodeRoutes(relRoute(i)); len(rs) != 0 {
			t.Errorf("route %s of deleted pod %d left behind: %v", relRoute(i), i, rs)
		}
	}
	relAssertNoTemp(t, n)
	assertLockFree(t, n)
}

// relAssertNoTemp fails when a temporary record file is left in stateDir.
func relAssertNoTemp(t *testing.T, n *node) {
	t.Helper()
	entries, _ := os.ReadDir(n.StateDir())
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary state file left behind: %s", e.Name())
		}
	}
}

// relParallel runs f(i) for every i in idx at once and returns the errors
// by i.
func relParallel(idx []int, f func(i int) error) map[int]error {
	var mu sync.Mutex
	errs := map[int]error{}
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(i); err != nil {
				mu.Lock()
				errs[i] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

func relRange(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// TestConcurrentAddDel runs 64 ADDs at once on one node through libcni
// (ptp + host-local, then podwire), a third of them forwarding pods with a
// route, then a mixed round (32 DELs racing 32 new ADDs), then every DEL at
// once. After each round the source-check sets hold exactly the live
// ordinary pods' elements (none lost, none extra, none twice), there is one
// state record per live pod, a route per live forwarding pod, no temporary
// file and the node lock is free. It finishes with no record and empty sets.
func TestConcurrentAddDel(t *testing.T) {
	n := newNode(t)
	start := time.Now()
	var mu sync.Mutex
	pods := map[int]*pod{}
	add := func(i int) error {
		p, err := n.addPod(relSpec(i))
		if err != nil {
			return err
		}
		mu.Lock()
		pods[i] = p
		mu.Unlock()
		return nil
	}
	del := func(i int) error {
		mu.Lock()
		p := pods[i]
		mu.Unlock()
		if err := p.Del(); err != nil {
			return err
		}
		p.ReleaseNS()
		return nil
	}
	liveOf := func(idx []int) []relPod {
		var out []relPod
		for _, i := range idx {
			out = append(out, relPod{p: pods[i], i: i, fwd: i%3 == 0})
		}
		return out
	}
	fail := func(round string, errs map[int]error) {
		t.Helper()
		if len(errs) == 0 {
			return
		}
		for i, err := range errs {
			t.Errorf("%s: pod %d: %v", round, i, err)
		}
		t.Fatalf("%s: %d of the invocations failed\nlog (tail):\n%s", round, len(errs), relTail(n.Log(), 40))
	}

	first := relRange(0, 64)
	fail("64 parallel ADDs", relParallel(first, add))
	t.Logf("64 parallel ADDs: %v", time.Since(start))
	relAssertNode(t, n, liveOf(first), nil)
	for _, i := range []int{0, 1} { // one forwarding and one ordinary pod pass CHECK
		if err := pods[i].Check(); err != nil {
			t.Errorf("CHECK of pod %d after the parallel ADDs: %v", i, err)
		}
	}

	// Mixed round: DEL the first half while the next 32 pods are added.
	mixed := time.Now()
	errs := relParallel(relRange(0, 64), func(j int) error {
		if j < 32 {
			return del(j)
		}
		return add(j + 32) // pods 64..95
	})
	fail("32 DELs racing 32 ADDs", errs)
	t.Logf("32 DELs racing 32 ADDs: %v", time.Since(mixed))
	live := append(relRange(32, 64), relRange(64, 96)...)
	relAssertNode(t, n, liveOf(live), relRange(0, 32))

	last := time.Now()
	fail("64 parallel DELs", relParallel(live, del))
	t.Logf("64 parallel DELs: %v", time.Since(last))
	relAssertNode(t, n, nil, relRange(0, 96))
	if c := n.podSetCount(); c != 0 {
		t.Errorf("%d elements left in inet podwire after every DEL", c)
	}
	t.Logf("concurrency: 160 ADD/DEL invocations in 3 racing rounds, %v in all", time.Since(start))
}

// relTail returns the last n lines of s.
func relTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// hostileList is podwire alone with a prevResult baked into its entry (as a
// primary plugin would have passed it), so that bad CNI_ARGS reach podwire
// itself: through the whole chain host-local refuses them first.
func hostileList(t *testing.T, n *node) *libcni.NetworkConfigList {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "podwire-test",
		"plugins": []any{map[string]any{
			"type":     "podwire",
			"stateDir": n.StateDir(),
			"logFile":  n.LogFile(),
			"prevResult": map[string]any{
				"cniVersion": "1.0.0",
				"interfaces": []any{map[string]any{"name": "vethhostile"}, map[string]any{"name": "eth0", "sandbox": "/var/run/netns/none"}},
				"ips":        []any{map[string]any{"address": "10.244.1.77/24", "interface": 1}},
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// assertNothingLeft: no record, no temporary file, lock free, no element in
// podwire's sets and the node's links as before.
func assertNothingLeft(t *testing.T, n *node, linksBefore int) {
	t.Helper()
	if recs := n.records(); len(recs) != 0 {
		t.Errorf("state records left: %v", recs)
	}
	relAssertNoTemp(t, n)
	assertLockFree(t, n)
	if c := n.podSetCount(); c != 0 {
		t.Errorf("%d elements in inet podwire", c)
	}
	if c := n.linkCount(); c != linksBefore {
		t.Errorf("%d links in the node, %d before", c, linksBefore)
	}
}

// TestHostileCNIArgs sends malformed CNI_ARGS through libcni
// (RuntimeConf.Args, joined "k=v;k=v"): ADD is refused with CNI error 4
// naming CNI_ARGS, in a message of bounded size, and nothing is left.
func TestHostileCNIArgs(t *testing.T) {
	n := newNode(t)
	linksBefore := n.linkCount()
	list := hostileList(t, n)
	for _, tc := range []struct {
		name string
		args [][2]string
	}{
		{"value with =", [][2]string{{"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "a=b"}}},
		{"pair without =", [][2]string{{"K8S_POD_NAMESPACE;K8S_POD_NAME", "x"}}},
		{"empty pair", [][2]string{{"K8S_POD_NAMESPACE", "default;"}}},
		{"64 KiB malformed pair", [][2]string{{"K8S_POD_NAME", strings.Repeat("x=", 32<<10)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &libcni.RuntimeConf{ContainerID: randHex(32), NetNS: "/var/run/netns/none", IfName: "eth0",
				Args: append([][2]string{{"IgnoreUnknown", "1"}}, tc.args...)}
			var err error
			n.Do(func() error {
				_, err = n.CNI.AddNetworkList(context.Background(), list, rt)
				return nil
			})
			if err == nil {
				t.Fatal("ADD with malformed CNI_ARGS succeeded")
			}
			if code := cniCode(err); code != 4 {
				t.Errorf("code %d, want 4 (invalid environment variables): %.300v", code, err)
			}
			if !strings.Contains(err.Error(), "CNI_ARGS") {
				t.Errorf("message does not name CNI_ARGS: %.300v", err)
			}
			if len(err.Error()) > 1000 {
				t.Errorf("message of %d bytes echoes the input", len(err.Error()))
			}
			assertNothingLeft(t, n, linksBefore)
		})
	}
}

// TestHostileContainerIDs runs the podwire binary directly (libcni refuses
// such IDs before any plugin) with container IDs and interface names a
// runtime must never send: path traversal, shell syntax, spaces, non-ASCII,
// over-long names, none at all. Every verb refuses with CNI error 4
// and nothing is made in stateDir or the node.
func TestHostileContainerIDs(t *testing.T) {
	n := newNode(t)
	linksBefore := n.linkCount()
	// The plugin entry as libcni would send it: name and cniVersion added.
	var m map[string]any
	if err := json.Unmarshal(hostileList(t, n).Plugins[0].Bytes, &m); err != nil {
		t.Fatal(err)
	}
	m["name"], m["cniVersion"] = "podwire-test", "1.0.0"
	conf, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cid, ifname string
		code              uint
	}{
		{"traversal", "../../../etc/podwire", "eth0", 4},
		{"slash", "abc/def", "eth0", 4},
		{"shell", "$(reboot)", "eth0", 4},
		{"space", "abc def", "eth0", 4},
		{"newline", "abc\ndef", "eth0", 4},
		{"leading dash", "-rf", "eth0", 4},
		{"non-ASCII", "cafébabe", "eth0", 4},
		{"percent", "abc%2F..%2Fx", "eth0", 4},
		{"empty", "", "eth0", 4},
		{"ifname traversal", randHex(8), "../eth0", 4},
		{"ifname colon", randHex(8), "eth0:1", 4},
		{"ifname too long", randHex(8), "eth0-much-too-long", 4},
		{"ifname dot-dot", randHex(8), "..", 4},
	} {
		for _, verb := range []string{"ADD", "CHECK", "DEL"} {
			t.Run(tc.name+"/"+verb, func(t *testing.T) {
				c := exec.Command(podwireBin)
				c.Env = []string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + tc.cid, "CNI_NETNS=/var/run/netns/none",
					"CNI_IFNAME=" + tc.ifname, "CNI_PATH=" + cniBinDir, "CNI_ARGS=IgnoreUnknown=1"}
				c.Stdin = bytes.NewReader(conf)
				var out []byte
				var runErr error
				n.Do(func() error {
					out, runErr = c.Output()
					return nil
				})
				if runErr == nil {
					t.Fatalf("%s with container ID %q ifname %q succeeded: %s", verb, tc.cid, tc.ifname, out)
				}
				te := &types.Error{}
				if err := json.Unmarshal(out, te); err != nil {
					t.Fatalf("no CNI error on stdout: %v: %q", runErr, out)
				}
				if te.Code != tc.code {
					t.Errorf("code %d, want %d: %v", te.Code, tc.code, te)
				}
				assertNothingLeft(t, n, linksBefore)
			})
		}
	}
}
