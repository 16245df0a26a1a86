package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podwire/podwire/internal/testns"
	"github.com/podwire/podwire/tools/image/ociimage"
)

// addonBins returns the directories of the binaries the add-on images are
// built from, as `make test-k8s` sets them (scripts/k8s-build.sh,
// scripts/flannel-build.sh), or skips the test saying which is missing.
func addonBins(t *testing.T) (k8sBin, flannelDir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chroot into the unpacked images); make test-k8s runs it as root")
	}
	k8sBin, flannelDir = os.Getenv("PODWIRE_K8S_BIN"), os.Getenv("PODWIRE_FLANNEL")
	if k8sBin == "" || flannelDir == "" {
		t.Skip("PODWIRE_K8S_BIN and PODWIRE_FLANNEL are not set: run `make test-k8s`, which builds the binaries (make k8s-bins) and sets them")
	}
	return k8sBin, flannelDir
}

// unpacked builds an image with build from the binaries in dir and
// returns its filesystem, unpacked into a temporary directory as a runtime
// would, and its config (entrypoint, environment).
func unpacked(t *testing.T, build func(dir string) (v1.Image, error), dir string) (root string, cfg v1.Config) {
	t.Helper()
	img, err := build(dir)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	root = t.TempDir()
	if err := ociimage.Unpack(img, root); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	return root, cf.Config
}

// chroot runs argv with env in root (chroot(8)) and returns its combined
// output; a failure to run is fatal.
func chroot(t *testing.T, root string, env []string, argv ...string) string {
	t.Helper()
	cmd := exec.Command("chroot", append([]string{root}, argv...)...)
	cmd.Env = append([]string{"PATH=" + imagePath}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in the image: %q: %v: %s", argv, err, out)
	}
	return string(out)
}

// chrootNS is chroot run inside netns, so that programs that change the
// ruleset change that netns's only.
func chrootNS(t *testing.T, netns ns.NetNS, root string, argv ...string) string {
	t.Helper()
	var out string
	if err := netns.Do(func(ns.NetNS) error {
		out = chroot(t, root, nil, argv...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantOutput fails the test unless out contains want.
func wantOutput(t *testing.T, what, out, want string) {
	t.Helper()
	if !strings.Contains(out, want) {
		t.Errorf("%s printed %q, want it to contain %q", what, out, want)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	t.Logf("%s: %s", what, first)
}

// TestFlannelImageRuns unpacks the flannel image and runs in it what
// flannel's stock manifest and flanneld run: the install containers'
// shell commands (cp of the CNI plugin and of the conflist into the
// host's directories, mounted there in a pod), flanneld itself, the CNI
// plugin, and the nft and iptables programs flanneld runs with
// EnableNFTables (nft for its rules; iptables and ip6tables to clean up
// the other mode's, without which it exits).
func TestFlannelImageRuns(t *testing.T) {
	_, flannelDir := addonBins(t)
	root, _ := unpacked(t, FlannelImage, flannelDir)
	// The manifest's hostPath and ConfigMap mounts.
	for _, d := range []string{"opt/cni/bin", "etc/cni/net.d", "etc/kube-flannel", "run/flannel"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := `{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel"},{"type":"portmap"}]}`
	if err := os.WriteFile(filepath.Join(root, "etc/kube-flannel/cni-conf.json"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	chroot(t, root, nil, "/bin/sh", "-c", "cp -f /flannel /opt/cni/bin/flannel")
	chroot(t, root, nil, "/bin/sh", "-c", "cp -f /etc/kube-flannel/cni-conf.json /etc/cni/net.d/10-flannel.conflist")
	if b, err := os.ReadFile(filepath.Join(root, "etc/cni/net.d/10-flannel.conflist")); err != nil || string(b) != conf {
		t.Errorf("install-cni: conflist %q, %v", b, err)
	}
	wantOutput(t, "the installed flannel plugin (CNI VERSION)",
		chroot(t, root, []string{"CNI_COMMAND=VERSION"}, "/opt/cni/bin/flannel"), `"0.3.1"`)
	wantOutput(t, "flanneld --version", chroot(t, root, nil, "/opt/bin/flanneld", "--version"), "v0.28.10")
	wantOutput(t, "nft --version", chroot(t, root, nil, "nft", "--version"), "nftables v")
	// What flanneld does with them, in a throwaway netns: a table through
	// `nft -f -` as knftables writes it, read back as JSON; iptables'
	// clean-up of its chains (its extensions load with dlopen).
	netns := testns.New(t)
	wantOutput(t, "nft -f - then --json list tables",
		chrootNS(t, netns, root, "/bin/sh", "-c", "echo 'add table ip flannel-ipv4' | nft -f - && nft --json list tables"), `"name": "flannel-ipv4"`)
	for _, ipt := range []string{"iptables", "ip6tables"} {
		wantOutput(t, ipt+" -t nat", chrootNS(t, netns, root, "/bin/sh", "-c",
			ipt+" -t nat -N FLANNEL-POSTRTG && "+ipt+" -t nat -A FLANNEL-POSTRTG -m comment --comment flanneld -j RETURN && "+ipt+" -t nat -S FLANNEL-POSTRTG && "+ipt+" -t nat -F FLANNEL-POSTRTG && "+ipt+" -t nat -X FLANNEL-POSTRTG"),
			"-A FLANNEL-POSTRTG -m comment --comment flanneld -j RETURN")
	}
}

// TestKubeProxyImageRuns unpacks the kube-proxy image and runs kube-proxy
// and nft, which its nftables mode runs (sigs.k8s.io/knftables execs
// `nft`; conntrack entries are cleared over netlink, and the start-up
// cleanup of iptables mode's rules is best effort, skipped without
// iptables).
func TestKubeProxyImageRuns(t *testing.T) {
	k8sBin, _ := addonBins(t)
	root, _ := unpacked(t, KubeProxyImage, k8sBin)
	wantOutput(t, "kube-proxy --version", chroot(t, root, nil, KubeProxyBin, "--version"), "Kubernetes v1.37.2")
	wantOutput(t, "nft --version", chroot(t, root, nil, "nft", "--version"), "nftables v")
	// knftables' calls, in a throwaway netns: a transaction from a file,
	// then the JSON listing (libjansson).
	if err := os.WriteFile(filepath.Join(root, "tx.nft"), []byte("add table inet kube-proxy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	netns := testns.New(t)
	chrootNS(t, netns, root, "nft", "-f", "/tx.nft")
	wantOutput(t, "nft --json list tables", chrootNS(t, netns, root, "nft", "--json", "list", "tables"), `"name": "kube-proxy"`)
}

// TestAgnhostImageRuns unpacks the agnhost image and runs its entrypoint.
func TestAgnhostImageRuns(t *testing.T) {
	k8sBin, _ := addonBins(t)
	root, cfg := unpacked(t, AgnhostImage, k8sBin)
	wantOutput(t, "agnhost --help", chroot(t, root, nil, append(cfg.Entrypoint, "--help")...), "netexec")
}
