package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Runtime is the container runtime a node runs: a containerd build and
// the runc its shims start, or CRI-O (CRIO) with that runc and Debian's
// conmon.
type Runtime struct {
	// Dir holds containerd, containerd-shim-runc-v2 and ctr of one build
	// (scripts/containerd-build.sh). "" is the host's, found on PATH
	// (Debian 12's containerd 1.6: the legacy leg).
	Dir string
	// Runc is the runc binary; "" is the host's, found on PATH.
	Runc string
	// CRIO, when set, is the directory of a CRI-O build
	// (scripts/crio-build.sh: crio and pinns): the nodes run CRI-O
	// instead of containerd (Dir is then unused), its containers under
	// Runc and the host's conmon (Debian's package).
	CRIO string
}

// RuntimeEnv are the variables of make test-k8s and make test-e2e that
// name the runtime under test (RuntimeFromEnv).
var RuntimeEnv = []string{"PODWIRE_CONTAINERD_DIR", "PODWIRE_RUNC"}

// CRIOEnv names the CRI-O build of a suite's CRI-O leg (Suite.CRIOLeg).
const CRIOEnv = "PODWIRE_CRIO_DIR"

// IsCRIO reports whether the nodes run CRI-O.
func (r Runtime) IsCRIO() bool { return r.CRIO != "" }

// Name is the runtime's name as the suites print it: "CRI-O" or
// "containerd".
func (r Runtime) Name() string {
	if r.IsCRIO() {
		return "CRI-O"
	}
	return "containerd"
}

// RuntimeFromEnv is the runtime PODWIRE_CONTAINERD_DIR and PODWIRE_RUNC
// name; either unset is the host's program.
func RuntimeFromEnv() Runtime {
	return Runtime{Dir: os.Getenv("PODWIRE_CONTAINERD_DIR"), Runc: os.Getenv("PODWIRE_RUNC")}
}

// Bin is the path of name (containerd, containerd-shim-runc-v2, ctr,
// runc, or CRI-O's crio, pinns and conmon) in the runtime, or the error
// saying where it is missing.
func (r Runtime) Bin(name string) (string, error) {
	switch {
	case name == "crio" || name == "pinns":
		p := filepath.Join(r.CRIO, name)
		if _, err := os.Stat(p); r.CRIO == "" || err != nil {
			return "", fmt.Errorf("missing %s in %q (%s; scripts/crio-build.sh builds it): %v", name, r.CRIO, CRIOEnv, err)
		}
		return p, nil
	case name == "runc" && r.Runc != "":
		if _, err := os.Stat(r.Runc); err != nil {
			return "", fmt.Errorf("runc %q (PODWIRE_RUNC; scripts/containerd-build.sh builds it): %w", r.Runc, err)
		}
		return r.Runc, nil
	case name != "runc" && name != "conmon" && r.Dir != "":
		p := filepath.Join(r.Dir, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("missing %s in %q (PODWIRE_CONTAINERD_DIR; scripts/containerd-build.sh builds it): %w", name, r.Dir, err)
		}
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found on PATH (scripts/install-deps.sh): %w", name, err)
	}
	return p, nil
}

// Check returns the first binary of the runtime that is missing.
func (r Runtime) Check() error {
	bins := []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"}
	if r.IsCRIO() {
		bins = []string{"crio", "pinns", "conmon", "runc"}
	}
	for _, b := range bins {
		if _, err := r.Bin(b); err != nil {
			return err
		}
	}
	return nil
}

// Environ is the environment containerd runs with: the test's, with Dir
// first on PATH. containerd starts its shim found by name on PATH, and
// looks beside its own binary only when PATH has none; the host's PATH
// holds Debian's 1.6 shim.
func (r Runtime) Environ() []string {
	env := os.Environ()
	if r.Dir == "" {
		return env
	}
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			env[i] = "PATH=" + r.Dir + string(os.PathListSeparator) + v
			return env
		}
	}
	return append(env, "PATH="+r.Dir)
}

// Version is the first line `containerd --version` prints: "containerd
// github.com/containerd/containerd/v2 v2.3.7 REVISION", or Debian's
// "containerd github.com/containerd/containerd 1.6.20~ds1 ...".
func (r Runtime) Version(ctx context.Context) (string, error) {
	bin, err := r.Bin("containerd")
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]), nil
}

// Major is containerd's major version, from Version's third field.
func (r Runtime) Major(ctx context.Context) (int, error) {
	v, err := r.Version(ctx)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(v)
	if len(f) < 3 {
		return 0, fmt.Errorf("containerd --version printed %q: no version field", v)
	}
	major, _, _ := strings.Cut(strings.TrimPrefix(f[2], "v"), ".")
	m, err := strconv.Atoi(major)
	if err != nil {
		return 0, fmt.Errorf("containerd --version printed %q: version %q: %w", v, f[2], err)
	}
	return m, nil
}

// Config is the runtime's config (ContainerdConfig) for its major version:
// version 3 for containerd 2, version 2 for 1.x.
func (r Runtime) Config(ctx context.Context, dir, pause string) (string, error) {
	major, err := r.Major(ctx)
	if err != nil {
		return "", err
	}
	runc, err := r.Bin("runc")
	if err != nil {
		return "", err
	}
	return ContainerdConfig(major, dir, runc, pause)
}
