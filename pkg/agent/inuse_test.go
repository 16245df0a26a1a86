package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChainInUse: podwire counts as in the chain only when the file the
// runtime reads (the first in libcni's order) holds it, directly or as
// Multus's delegate; Multus's own configuration is never the file podwire
// edits.
func TestChainInUse(t *testing.T) {
	// The shapes Multus writes (its generated 00-multus.conf): the thin
	// plugin embeds the primary's conflist, the thick plugin's shim names
	// its path on the node.
	multusThin := func(delegate string) string {
		return `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","capabilities":{"portMappings":true},` +
			`"kubeconfig":"/etc/cni/net.d/multus.d/multus.kubeconfig","delegates":[` + delegate + `]}`
	}
	multusClusterNetwork := func(cn string) string {
		return `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim","logLevel":"verbose","logToStderr":true,` +
			`"clusterNetwork":"` + cn + `"}`
	}
	multusThick := multusClusterNetwork("/host/etc/cni/net.d/10-flannel.conflist")
	for _, tc := range []struct {
		name  string
		files map[string]string
		mode  string
		// regenerate is Multus's rewrite of its configuration after the
		// primary's file changed (nil: none).
		regenerate func(primary string) (string, string)
		want       string // substring of InUse's error before regenerate ("" = nil)
	}{
		{name: "flannel alone", files: map[string]string{"10-flannel.conflist": flannel}, mode: ModeAuto},
		{name: "derived conflist shadowed by a file sorting first", mode: ModeDerive,
			files: map[string]string{"00-a.conflist": cilium, "05-cilium.conflist": cilium},
			want:  "the runtime reads"},
		{name: "Multus thin, before and after it follows the primary", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusThin(flannel), "10-flannel.conflist": flannel},
			regenerate: func(primary string) (string, string) {
				return "00-multus.conf", multusThin(primary)
			},
			want: "(Multus), whose delegate does not chain podwire yet"},
		{name: "Multus thick shim", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusThick, "10-flannel.conflist": flannel}},
		// The other forms of clusterNetwork (multus-cni's getNetDelegate).
		{name: "Multus clusterNetwork by the conflist's name", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("cbr0"), "10-flannel.conflist": flannel}},
		{name: "Multus clusterNetwork by the node's path", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("/etc/cni/net.d/10-flannel.conflist"), "10-flannel.conflist": flannel}},
		{name: "Multus clusterNetwork a directory of another chain", mode: ModeAuto,
			files: map[string]string{
				"00-multus.conf": multusClusterNetwork("/host/etc/cni/net.d/cluster"), "10-flannel.conflist": flannel,
				"cluster/10-cluster.conflist": strings.Replace(flannel, "cbr0", "cluster", 1),
			},
			want: `whose clusterNetwork "/host/etc/cni/net.d/cluster" is `},
		{name: "Multus clusterNetwork a directory of podwire's chain", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("/etc/cni/net.d"), "10-flannel.conflist": flannel},
			// Multus reads its own file first there: a loop, no chain of podwire.
			want: "does not chain podwire"},
		{name: "Multus clusterNetwork of no configuration's name", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("kube-system-net"), "10-flannel.conflist": flannel},
			want:  `clusterNetwork "kube-system-net" is the name of no configuration`},
		{name: "Multus clusterNetwork outside the conf dir", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("/opt/cni/conf/10-flannel.conflist"), "10-flannel.conflist": flannel},
			want:  "lies outside the conf dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c := &Chain{ConfDir: dir, Mode: tc.mode, HostConfDir: "/host/etc/cni/net.d"}
			res, err := c.Sync()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(res.Primary, "multus") {
				t.Fatalf("Sync took Multus's %s for the primary", res.Primary)
			}
			err = c.InUse(res.Conflist)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("InUse(%s): %v", res.Conflist, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("InUse(%s) = %v, want an error with %q", res.Conflist, err, tc.want)
			}
			if tc.regenerate == nil {
				return
			}
			primary, _ := os.ReadFile(res.Conflist)
			name, data := tc.regenerate(string(primary))
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := c.InUse(res.Conflist); err != nil {
				t.Fatalf("after Multus followed the primary: %v", err)
			}
		})
	}
}
