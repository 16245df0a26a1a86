package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podwire/podwire/tools/image/ociimage"
)

// The add-ons' images (flannel, kube-proxy, CoreDNS, agnhost) are built here with
// tools/image/ociimage from binaries the run built from source and from the
// host's own programs (nft and iptables with their shared libraries,
// busybox), and pushed to the run's registry (StartRegistry): the nodes'
// containerd pulls them from there as from any registry.

// imagePath is the PATH of the add-ons' images.
const imagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// hostTool is the host's program name (found in PATH) at /usr/sbin/name,
// with its libraries: nft for kube-proxy's and flannel's nftables modes
// (sigs.k8s.io/knftables runs the nft binary).
func hostTool(name string) ([]ImageFile, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%s not found on the host (scripts/install-deps.sh): %w", name, err)
	}
	return ociimage.HostProgram(p, "/usr/sbin/"+name)
}

// busyboxFiles is the host's static busybox at /bin/busybox with each of
// applets as a symlink to it in /bin.
func busyboxFiles(applets ...string) ([]ImageFile, error) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("busybox not found on the host (package busybox-static, scripts/deps.list): %w", err)
	}
	files, err := ociimage.HostProgram(bb, "/bin/busybox")
	if err != nil {
		return nil, err
	}
	for _, a := range applets {
		files = append(files, ociimage.Symlink("/bin/"+a, "busybox"))
	}
	return files, nil
}

// binFile reads a binary built by the run as an image file at dest.
func binFile(src, dest string) (ImageFile, error) {
	b, err := os.ReadFile(src)
	return ImageFile{Path: dest, Mode: 0o755, Data: b}, err
}

// iptablesFiles is the host's iptables (nft backend: xtables-nft-multi,
// which dispatches on the name it is run as) with iptables, ip6tables and
// their -save and -restore as symlinks to it, its libraries, and its match
// and target extensions, which it loads with dlopen (so ldd does not name
// them).
func iptablesFiles() ([]ImageFile, error) {
	files, err := hostTool("xtables-nft-multi")
	if err != nil {
		return nil, err
	}
	for _, n := range []string{"iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore"} {
		files = append(files, ociimage.Symlink("/usr/sbin/"+n, "xtables-nft-multi"))
	}
	exts, _ := filepath.Glob("/usr/lib/*-linux-gnu/xtables/*.so")
	if len(exts) == 0 {
		return nil, fmt.Errorf("no iptables extensions in /usr/lib/*-linux-gnu/xtables (package iptables, scripts/deps.list)")
	}
	for _, e := range exts {
		f, err := binFile(e, e)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// netfilterFiles are what a primary's agent that programs nftables needs
// of the host: nft (knftables runs it), iptables (iptablesFiles: the
// agents look at it at start), and busybox with applets.
func netfilterFiles(applets ...string) ([]ImageFile, error) {
	files, err := hostTool("nft")
	if err != nil {
		return nil, err
	}
	ipt, err := iptablesFiles()
	if err != nil {
		return nil, err
	}
	bb, err := busyboxFiles(applets...)
	if err != nil {
		return nil, err
	}
	return append(append(files, ipt...), bb...), nil
}

// FlannelImage holds flanneld and install-conf at /opt/bin (as flannel's
// image has them), the flannel CNI plugin at /flannel (as
// flannel-cni-plugin's image has it), nft (flanneld's EnableNFTables mode
// runs it through knftables), iptables and ip6tables (at start flanneld
// cleans up the rules of the mode it does not use, and exits when it
// cannot find them), and busybox with /bin/sh and /bin/cp for the stock
// manifest's install containers. dir is scripts/flannel-build.sh's
// output.
func FlannelImage(dir string) (v1.Image, error) {
	files, err := netfilterFiles("sh", "cp")
	if err != nil {
		return nil, err
	}
	for _, b := range []struct{ src, dest string }{
		{"flanneld", "/opt/bin/flanneld"}, {"install-conf", "/opt/bin/install-conf"}, {"flannel", "/flannel"},
	} {
		f, err := binFile(filepath.Join(dir, b.src), b.dest)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return ociimage.Image(files, ociimage.Config{Entrypoint: []string{"/opt/bin/flanneld"}, Env: []string{"PATH=" + imagePath}})
}

// CalicoNodeBin is where CalicoNodeImage puts calico-node: calico/node's
// path, which its manifest's probes and preStop hook name.
const CalicoNodeBin = "/bin/calico-node"

// calicoStart is what calico/node's image runs (start_runit, its
// rc.local and its runit services) for the Kubernetes datastore and VXLAN
// (no BGP: no confd or bird), without runit: the start-up and the tunnel
// address's first allocation once, then each long-running process of the
// image's services, restarted when it exits, as runit restarts it (Felix
// exits on every configuration change and relies on that).
const calicoStart = `#!/bin/sh
set -e
calico-node -startup
calico-node -allocate-tunnel-addrs -allocate-tunnel-addrs-run-once
NODENAME=$(cat /var/lib/calico/nodename)
export NODENAME FELIX_FELIXHOSTNAME="$NODENAME" FELIX_DATASTORETYPE="$DATASTORE_TYPE"
service() {
	while :; do
		calico-node "$@" || echo "calico-start: calico-node $* exited $?, restarting" >&2
		sleep 1
	done
}
service -felix &
service -allocate-tunnel-addrs &
service -monitor-addresses &
service -monitor-token &
service -status-reporter &
wait
`

// calicoFelixConfig is calico/node's /etc/calico/felix.cfg (its
// node/filesystem/etc/calico/felix.cfg): Felix logs to stderr only.
const calicoFelixConfig = `[global]
MetadataAddr = None
LogFilePath = None
LogSeverityFile = None
LogSeveritySys = None
`

// CalicoNodeImage holds calico-node (from dir, scripts/calico-build.sh's
// output) at CalicoNodeBin, its start (calicoStart, the entrypoint, at
// /sbin/calico-start) and Felix's configuration file as calico/node's image
// has them, nft (Felix's nftables mode runs it through knftables),
// iptables (Felix reads its version to choose masquerade's fully-random)
// and busybox's sh, cat and sleep for the start.
func CalicoNodeImage(dir string) (v1.Image, error) {
	files, err := netfilterFiles("sh", "cat", "sleep")
	if err != nil {
		return nil, err
	}
	f, err := binFile(filepath.Join(dir, "calico-node"), CalicoNodeBin)
	if err != nil {
		return nil, err
	}
	files = append(files, f,
		ImageFile{Path: "/sbin/calico-start", Mode: 0o755, Data: []byte(calicoStart)},
		ImageFile{Path: "/etc/calico/felix.cfg", Mode: 0o644, Data: []byte(calicoFelixConfig)})
	// FELIX_DebugSkipCTLBCleanup: outside BPF mode Felix first removes
	// what BPF mode's connect-time load balancer may have left, through
	// libbpf (felix/dataplane/linux/int_dataplane.go), and a build without
	// cgo has only libbpf's stub, which panics. This variable is Felix's
	// own switch for skipping that clean-up (felix/bpf/nat/connecttime.go);
	// no BPF mode ever ran on these nodes.
	return ociimage.Image(files, ociimage.Config{Entrypoint: []string{"/sbin/calico-start"},
		Env: []string{"PATH=" + imagePath, "FELIX_DebugSkipCTLBCleanup=true"}})
}

// CalicoCNIImage holds install (calico/cni's install-cni), the calico
// plugin and calico-ipam (a link to it: it dispatches on its name) in
// /opt/cni/bin, as calico/cni's image has them (from dir,
// scripts/calico-build.sh's output). install copies every other file of
// that directory into the node's: calico/cni's image also ships flannel,
// host-local, loopback, portmap and tuning, which would replace the node's
// own, so this one holds Calico's two alone.
func CalicoCNIImage(dir string) (v1.Image, error) {
	files := []ImageFile{ociimage.Symlink("/opt/cni/bin/calico-ipam", "calico")}
	for _, b := range []string{"install", "calico"} {
		f, err := binFile(filepath.Join(dir, b), "/opt/cni/bin/"+b)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return ociimage.Image(files, ociimage.Config{Entrypoint: []string{"/opt/cni/bin/install"}, Env: []string{"PATH=" + imagePath}})
}

// KubeProxyBin is where KubeProxyImage puts kube-proxy (kubeadm's image's
// path).
const KubeProxyBin = "/usr/local/bin/kube-proxy"

// KubeProxyImage holds kube-proxy (from k8sBinDir) at KubeProxyBin and nft,
// the one program its nftables mode runs (sigs.k8s.io/knftables; it clears
// conntrack entries over netlink, and its start-up clean-up of iptables
// mode's rules is best effort, skipped without iptables).
func KubeProxyImage(k8sBinDir string) (v1.Image, error) {
	files, err := hostTool("nft")
	if err != nil {
		return nil, err
	}
	f, err := binFile(filepath.Join(k8sBinDir, "kube-proxy"), KubeProxyBin)
	if err != nil {
		return nil, err
	}
	return ociimage.Image(append(files, f), ociimage.Config{Entrypoint: []string{KubeProxyBin}, Env: []string{"PATH=" + imagePath}})
}

// CoreDNSBin is where CoreDNSImage puts coredns (its own image's path).
const CoreDNSBin = "/coredns"

// CoreDNSImage holds coredns (from dir, scripts/coredns-build.sh's output)
// at CoreDNSBin, its entrypoint, as CoreDNS's image has it; statically
// linked, it needs nothing else.
func CoreDNSImage(dir string) (v1.Image, error) {
	f, err := binFile(filepath.Join(dir, "coredns"), CoreDNSBin)
	if err != nil {
		return nil, err
	}
	return ociimage.Image([]ImageFile{f}, ociimage.Config{Entrypoint: []string{CoreDNSBin}, Env: []string{"PATH=" + imagePath}})
}

// AgnhostImage holds agnhost (from k8sBinDir) at /agnhost, its entrypoint,
// as Kubernetes' e2e image has it.
func AgnhostImage(k8sBinDir string) (v1.Image, error) {
	f, err := binFile(filepath.Join(k8sBinDir, "agnhost"), "/agnhost")
	if err != nil {
		return nil, err
	}
	return ociimage.Image([]ImageFile{f}, ociimage.Config{Entrypoint: []string{"/agnhost"}, Env: []string{"PATH=" + imagePath}})
}

// MultusDir is where MultusImage puts Multus's binaries, as its thick
// image (images/Dockerfile.thick) has them.
const MultusDir = "/usr/src/multus-cni/bin"

// MultusImageRef names MultusImage in the archive vmimages writes, which
// the VM's nodes import: the VM pushes no image it can import instead.
const MultusImageRef = "docker.io/k8snetworkplumbingwg/multus-cni:v4.2.2-thick"

// MultusImage holds multus-daemon, multus-shim and passthru (from dir,
// scripts/multus-build.sh's output) in MultusDir, busybox with /bin/sh
// and /bin/cp for the stock manifest's install container, which copies the
// shim and passthru into the node's CNI bin dir, and what its distribution
// base image has that the daemon needs: an /etc/passwd and /etc/group
// naming root (it refuses to start unless os/user names its user root,
// which the static build finds in /etc/passwd only), and /var/run as a
// link to /run (the runtimes name a pod's netns /var/run/netns/..., and the
// manifest mounts the node's at /run/netns).
func MultusImage(dir string) (v1.Image, error) {
	files, err := busyboxFiles("sh", "cp")
	if err != nil {
		return nil, err
	}
	files = append(files, ImageFile{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\n")},
		ImageFile{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\n")}, ociimage.Symlink("/var/run", "/run"))
	for _, b := range []string{"multus-daemon", "multus-shim", "passthru"} {
		f, err := binFile(filepath.Join(dir, b), MultusDir+"/"+b)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return ociimage.Image(files, ociimage.Config{Entrypoint: []string{MultusDir + "/multus-daemon"}, Env: []string{"PATH=" + imagePath}})
}

// Push pushes img to the run's registry as RegistryHost/repoTag (e.g.
// "flannel/flannel:v0.28.10"), from the outside netns, and returns the
// reference pinned by digest ("RegistryHost/flannel/flannel@sha256:...").
func (c *Cluster) Push(ctx context.Context, img v1.Image, repoTag string) (string, error) {
	ref := RegistryHost + "/" + repoTag
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return "", err
	}
	d, err := ociimage.Push(ctx, ref, img, ociimage.PushOptions{Insecure: true, DialContext: dialer(c.OutsideNetNS)})
	if err != nil {
		return "", err
	}
	return tag.Context().Name() + "@" + d.String(), nil
}

// VRRPImageRef names VRRPImage in the archive vmimages writes.
const VRRPImageRef = "docker.io/podwire/vrrp:keepalived"

// VRRPImage holds a VRRP speaker (RFC 5798): the host's keepalived (Debian's
// package, scripts/deps.list) with its shared libraries at
// /usr/sbin/keepalived, and busybox as /bin/sh, its entrypoint, so that a
// pod writes keepalived's configuration before it runs it.
func VRRPImage() (v1.Image, error) {
	files, err := hostTool("keepalived")
	if err != nil {
		return nil, err
	}
	bb, err := busyboxFiles("sh", "cat", "mkdir", "sleep")
	if err != nil {
		return nil, err
	}
	return ociimage.Image(append(files, bb...), ociimage.Config{Entrypoint: []string{"/bin/sh"}, Env: []string{"PATH=" + imagePath}})
}
