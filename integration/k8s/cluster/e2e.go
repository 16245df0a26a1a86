package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podwire/podwire/tools/image/ociimage"
)

// WriteE2ERepoList writes, at path, the KUBE_TEST_REPO_LIST file of
// Kubernetes' e2e suite (test/utils/image's RegistryList, YAML) that maps
// its two registries the network specs pull from to the run's registry:
// registry.k8s.io/e2e-test-images (agnhost, ...) to
// RegistryHost/e2e-test-images, and registry.k8s.io (pause) to
// RegistryHost/k8s. Every other registry keeps its public name, which no
// node can reach: a spec that needs one of its images fails at its pull.
func WriteE2ERepoList(path string) error {
	list := fmt.Sprintf("promoterE2eRegistry: %s/e2e-test-images\ngcRegistry: %s/k8s\n", RegistryHost, RegistryHost)
	return os.WriteFile(path, []byte(list), 0o644)
}

// E2ECommand returns the command that runs Kubernetes' e2e suite (bin, the
// test binary of k8s.io/kubernetes/test/e2e) against the cluster, as the
// admin, inside the first node's netns as Kubectl does, with the cluster's
// kubectl, KUBE_TEST_REPO_LIST set to repoList, and its output directory
// (--e2e-output-dir, /tmp by default), HOME and TMPDIR in the run's
// directory; args follow (--ginkgo.focus, --report-dir, ...).
func (c *Cluster) E2ECommand(ctx context.Context, bin, repoList string, args ...string) (*exec.Cmd, error) {
	out := filepath.Join(c.Dir, "e2e-output")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	argv := append([]string{"--net=" + c.Nodes[0].NetNS, "--", bin,
		"--kubeconfig=" + c.AdminKubeconfig, "--kubectl-path=" + c.k8sBin("kubectl"),
		"--e2e-output-dir=" + out}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	cmd.Dir = out
	// TMPDIR: e2e.test makes a directory in it whenever its specs are
	// built, listed or not (test/e2e/kubectl's kuberc specs), and does not
	// remove it.
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+repoList, "HOME="+out, "TMPDIR="+out)
	return cmd, nil
}

// PauseRegistryImage is the pause image (the cluster's sandbox process,
// pauseSource) as an image to push, with /pause as its entrypoint like
// registry.k8s.io/pause; Start imports the same program as PauseImage.
func PauseRegistryImage(dir string) (v1.Image, error) {
	src := filepath.Join(dir, "pause-registry-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module pause\n\ngo 1.22\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(pauseSource), 0o644); err != nil {
		return nil, err
	}
	bin, err := GoBinary(src)
	if err != nil {
		return nil, err
	}
	return ociimage.Image([]ImageFile{{Path: "pause", Mode: 0o755, Data: bin}}, ociimage.Config{Entrypoint: []string{"/pause"}})
}

// E2EAgnhostImage is agnhost as Kubernetes' e2e specs run it: upstream's
// image (test/images/agnhost/Dockerfile) is Alpine with agnhost at
// /agnhost, its entrypoint, and the tools the specs exec in its containers
// (`/bin/sh -c "curl ..."`, `echo hostName | nc -w 1 -u IP PORT | grep -v
// ...`, the DNS specs' probe loops of dig and getent), and porter's TLS
// certificate and key in / (`agnhost porter` reads them from its working
// directory). This one holds agnhost and those two (from k8sBinDir and its
// agnhost-files, scripts/e2e-build.sh), curl, OpenBSD's nc and the
// resolver tools of dnsTools, each with its libraries (packages curl and
// netcat-openbsd, scripts/deps.list), and busybox with every applet
// (busyboxApplets: its nslookup resolves an ExternalName Service, its seq
// counts the session affinity specs' requests).
func E2EAgnhostImage(k8sBinDir string) (v1.Image, error) {
	agnhost, err := binFile(filepath.Join(k8sBinDir, "agnhost"), "/agnhost")
	if err != nil {
		return nil, err
	}
	files := []ImageFile{agnhost}
	for _, name := range []string{"localhost.crt", "localhost.key"} {
		b, err := os.ReadFile(filepath.Join(k8sBinDir, "agnhost-files", name))
		if err != nil {
			return nil, fmt.Errorf("porter's %s (scripts/e2e-build.sh): %w", name, err)
		}
		files = append(files, ImageFile{Path: name, Mode: 0o644, Data: b})
	}
	tools, err := dnsTools()
	if err != nil {
		return nil, err
	}
	more, err := hostPrograms([]hostProgram{{"curl", "/usr/bin/curl"}, {"nc.openbsd", "/usr/bin/nc"}})
	if err != nil {
		return nil, err
	}
	files = append(append(files, tools...), more...)
	applets, err := busyboxApplets(files)
	if err != nil {
		return nil, err
	}
	files = append(files, applets...)
	return ociimage.Image(files, ociimage.Config{Entrypoint: []string{"/agnhost"}, Env: []string{"PATH=" + imagePath}})
}

// busyboxApplets links every applet of the host's busybox (`busybox
// --list`) into /bin, as upstream's Alpine image has them all (specs
// beyond the Conformance ones pipe their probes through date, tr, awk,
// ...), except the names a program of files already has: /bin/sh stays
// dash and nc OpenBSD's, whose -u busybox's lacks.
func busyboxApplets(files []ImageFile) ([]ImageFile, error) {
	out, err := exec.Command("busybox", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list (package busybox-static, scripts/deps.list): %w", err)
	}
	have := map[string]bool{}
	for _, f := range files {
		have[path.Base(f.Path)] = true
	}
	var links []ImageFile
	for _, applet := range strings.Fields(string(out)) {
		if !have[applet] {
			links = append(links, ociimage.Symlink("/bin/"+applet, "busybox"))
		}
	}
	return links, nil
}

// E2EGlibcDNSImage is the DNS specs' second prober, upstream's
// glibc-dns-testing (test/images/glibc-dns-testing: Debian with dnsutils,
// so that a glibc resolver is probed beside agnhost's musl): the specs run
// their probe loop in it with `sh -c`. It holds dnsTools, the host's
// Debian programs, and runs /bin/sh.
func E2EGlibcDNSImage() (v1.Image, error) {
	files, err := dnsTools()
	if err != nil {
		return nil, err
	}
	return ociimage.Image(files, ociimage.Config{Entrypoint: []string{"/bin/sh"}, Env: []string{"PATH=" + imagePath}})
}

// dnsTools are the programs of the DNS specs' probe loops (dns_common.go's
// createProbeCommand: `for i in $(seq 1 600); do check="$(dig +notcp
// +noall +answer +search NAME A)" && test -n "$check" && echo OK >
// /results/FILE; ...; test -n "$(getent hosts NAME)" && ...; sleep 1;
// done`) and the other specs' small tools, each with its libraries: the
// host's dash as /bin/sh, dig (package bind9-dnsutils), glibc's getent with
// an nsswitch.conf that reads /etc/hosts (the kubelet's, with the pod's
// hostname and FQDN) before DNS, as Debian's does (glibc's default without
// one asks DNS first and stops at its NXDOMAIN), and busybox for seq,
// sleep, cat, grep. Not busybox's sh: in a container (with /proc) it runs
// its own applets first, and its nc has no -u.
func dnsTools() ([]ImageFile, error) {
	files, err := hostPrograms([]hostProgram{
		{"dash", "/bin/sh"}, {"busybox", "/bin/busybox"}, {"dig", "/usr/bin/dig"}, {"getent", "/usr/bin/getent"},
	})
	if err != nil {
		return nil, err
	}
	files = append(files, ImageFile{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")})
	for _, applet := range []string{"cat", "grep", "seq", "sleep"} {
		files = append(files, ociimage.Symlink("/bin/"+applet, "busybox"))
	}
	return files, nil
}

// hostProgram is a program of the host (a name looked up in PATH) and its
// path in an image.
type hostProgram struct{ name, dest string }

// hostPrograms returns each program at its dest with its shared libraries
// (ociimage.HostProgram).
func hostPrograms(progs []hostProgram) ([]ImageFile, error) {
	var files []ImageFile
	for _, p := range progs {
		path, err := exec.LookPath(p.name)
		if err != nil {
			return nil, fmt.Errorf("%s not found on the host (scripts/deps.list): %w", p.name, err)
		}
		f, err := ociimage.HostProgram(path, p.dest)
		if err != nil {
			return nil, err
		}
		files = append(files, f...)
	}
	return files, nil
}
