package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The add-ons' images (flannel, kube-proxy, agnhost) are built here from
// binaries the run built from source and from the host's own programs
// (nft with its shared libraries, busybox), with go-containerregistry, and
// pushed to the run's registry (StartRegistry): the nodes' containerd pulls
// them from there as from any registry.

// imagePath is the PATH of the add-ons' images.
const imagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// HostProgram returns the host's program at path as image files at the
// same path, with every shared library `ldd` names (and the dynamic
// loader) at the paths it names; a static binary is the one file.
func HostProgram(path string) ([]ImageFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	files := []ImageFile{{Path: strings.TrimPrefix(path, "/"), Mode: 0o755, Data: data}}
	out, err := exec.Command("ldd", path).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return files, nil
		}
		return nil, fmt.Errorf("ldd %s: %v: %s", path, err, out)
	}
	// "libx.so.1 => /lib/.../libx.so.1 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)".
	re := regexp.MustCompile(`(?m)^\s*(?:\S+ => )?(/\S+) \(0x`)
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		lib, err := os.ReadFile(m[1]) // through symlinks: the library itself, at the name the loader asks
		if err != nil {
			return nil, err
		}
		files = append(files, ImageFile{Path: strings.TrimPrefix(m[1], "/"), Mode: 0o755, Data: lib})
	}
	return files, nil
}

// BuildImage is a one-layer image for the host's architecture holding
// files, with entrypoint and imagePath, reproducible (epoch mtimes).
func BuildImage(files []ImageFile, entrypoint []string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	for _, f := range files {
		for d := filepath.Dir(f.Path); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var dirList []string
	for d := range dirs {
		dirList = append(dirList, d)
	}
	// Parents before children, the same order each time.
	slices.SortFunc(dirList, func(a, b string) int {
		if c := strings.Count(a, "/") - strings.Count(b, "/"); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f.Path] {
			continue
		}
		seen[f.Path] = true
		if err := tw.WriteHeader(&tar.Header{Name: f.Path, Mode: f.Mode, Size: int64(len(f.Data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = entrypoint
	cf.Config.Env = []string{"PATH=" + imagePath}
	return mutate.ConfigFile(img, cf)
}

// hostTools are the host programs the add-on images run besides their own
// binaries: nft for kube-proxy's and flannel's nftables modes (knftables
// runs the nft binary), busybox for the shell and cp of flannel's install
// containers.
func hostTools(names ...string) ([]ImageFile, error) {
	var files []ImageFile
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			return nil, fmt.Errorf("%s not found on the host (scripts/install-deps.sh): %w", n, err)
		}
		if p, err = filepath.EvalSymlinks(p); err != nil {
			return nil, err
		}
		f, err := HostProgram(p)
		if err != nil {
			return nil, err
		}
		if n != "busybox" {
			f[0].Path = "usr/sbin/" + n
		}
		files = append(files, f...)
	}
	return files, nil
}

// binFile reads a binary built by the run as an image file at dest.
func binFile(src, dest string) (ImageFile, error) {
	b, err := os.ReadFile(src)
	return ImageFile{Path: strings.TrimPrefix(dest, "/"), Mode: 0o755, Data: b}, err
}

// iptablesFiles is the host's iptables (nft backend: xtables-nft-multi,
// which dispatches on its name) as iptables, ip6tables and their -save and
// -restore, with its libraries and its match and target extensions, which
// it loads with dlopen (so ldd does not name them).
func iptablesFiles() ([]ImageFile, error) {
	multi, err := exec.LookPath("xtables-nft-multi")
	if err != nil {
		return nil, fmt.Errorf("xtables-nft-multi not found (package iptables, scripts/deps.list): %w", err)
	}
	files, err := HostProgram(multi)
	if err != nil {
		return nil, err
	}
	for _, n := range []string{"iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore"} {
		files = append(files, ImageFile{Path: "usr/sbin/" + n, Mode: 0o755, Data: files[0].Data})
	}
	exts, _ := filepath.Glob("/usr/lib/*-linux-gnu/xtables/*.so")
	if len(exts) == 0 {
		return nil, fmt.Errorf("no iptables extensions in /usr/lib/*-linux-gnu/xtables")
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

// FlannelImage holds flanneld and install-conf at /opt/bin (as flannel's
// image has them), the flannel CNI plugin at /flannel (as
// flannel-cni-plugin's image has it), nft and iptables (flanneld cleans up
// the rules of the mode it does not use, as flannel's image, which has
// both, lets it), and busybox as /bin/sh and /bin/cp. dir is
// scripts/flannel-build.sh's output.
func FlannelImage(dir string) (v1.Image, error) {
	files, err := hostTools("nft", "busybox")
	if err != nil {
		return nil, err
	}
	ipt, err := iptablesFiles()
	if err != nil {
		return nil, err
	}
	files = append(files, ipt...)
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return nil, err
	}
	for _, applet := range []string{"/bin/sh", "/bin/cp"} {
		f, err := binFile(bb, applet)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	for src, dest := range map[string]string{"flanneld": "/opt/bin/flanneld", "install-conf": "/opt/bin/install-conf", "flannel": "/flannel"} {
		f, err := binFile(filepath.Join(dir, src), dest)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return BuildImage(files, []string{"/opt/bin/flanneld"})
}

// KubeProxyBin is where KubeProxyImage puts kube-proxy (kubeadm's image's
// path).
const KubeProxyBin = "/usr/local/bin/kube-proxy"

// KubeProxyImage holds kube-proxy (from k8sBinDir) at KubeProxyBin and nft.
func KubeProxyImage(k8sBinDir string) (v1.Image, error) {
	files, err := hostTools("nft")
	if err != nil {
		return nil, err
	}
	f, err := binFile(filepath.Join(k8sBinDir, "kube-proxy"), KubeProxyBin)
	if err != nil {
		return nil, err
	}
	return BuildImage(append(files, f), []string{KubeProxyBin})
}

// AgnhostImage holds agnhost (from k8sBinDir) at /agnhost, its entrypoint,
// as Kubernetes' e2e image has it.
func AgnhostImage(k8sBinDir string) (v1.Image, error) {
	f, err := binFile(filepath.Join(k8sBinDir, "agnhost"), "/agnhost")
	if err != nil {
		return nil, err
	}
	return BuildImage([]ImageFile{f}, []string{"/agnhost"})
}

// Push pushes img to the run's registry as RegistryHost/repoTag (e.g.
// "flannel/flannel:v0.28.10"), from the outside netns, and returns the
// reference pinned by digest.
func (c *Cluster) Push(ctx context.Context, img v1.Image, repoTag string) (string, error) {
	ref, err := name.ParseReference(RegistryHost+"/"+repoTag, name.Insecure)
	if err != nil {
		return "", err
	}
	tr := &http.Transport{DialContext: dialer(c.OutsideNetNS)}
	defer tr.CloseIdleConnections()
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithTransport(tr)); err != nil {
		return "", fmt.Errorf("push of %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return ref.Context().Name() + "@" + d.String(), nil
}
