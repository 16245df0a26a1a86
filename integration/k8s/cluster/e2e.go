package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podwire/podwire/internal/ociimage"
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
// ...`), and porter's TLS certificate and key in / (`agnhost porter` reads
// them from its working directory). This one holds agnhost and those two
// (from k8sBinDir and its agnhost-files, scripts/e2e-build.sh), and the
// host's dash as
// /bin/sh, curl, OpenBSD's nc and busybox for the small tools (grep, cat,
// ...), each with its libraries (packages dash, curl, netcat-openbsd and
// busybox-static, scripts/deps.list; busybox's nslookup resolves an
// ExternalName Service and its seq counts the session affinity specs'
// requests). Not busybox's sh: in a container
// (with /proc) it runs its own applets first, and its nc has no -u.
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
	for _, p := range []struct{ name, dest string }{
		{"dash", "/bin/sh"}, {"busybox", "/bin/busybox"}, {"curl", "/usr/bin/curl"}, {"nc.openbsd", "/usr/bin/nc"},
	} {
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
	for _, applet := range []string{"cat", "grep", "hostname", "ls", "nslookup", "seq", "sleep", "timeout", "wget"} {
		files = append(files, ociimage.Symlink("/bin/"+applet, "busybox"))
	}
	return ociimage.Image(files, ociimage.Config{Entrypoint: []string{"/agnhost"}, Env: []string{"PATH=" + imagePath}})
}
