package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Suite is a test package's cluster: what its TestMain needs from `make
// test-k8s`, how it starts the cluster and what it sets up on it. One
// cluster serves every test of the package.
type Suite struct {
	// Env are the variables of make test-k8s the suite reads (TestEnv).
	Env []string
	// Options are the cluster's options for the environment; Main sets
	// Logf, Keep (PODWIRE_K8S_KEEP) and, when it is the zero value,
	// Runtime (RuntimeFromEnv).
	Options func(env map[string]string) Options
	// Timeout bounds the cluster's start and Setup together.
	Timeout time.Duration
	// Setup prepares the started cluster for the tests (podwire's
	// install). Its stop, when not nil, runs after the tests, before the
	// cluster stops.
	Setup func(ctx context.Context, c *Cluster, env map[string]string) (stop func(), err error)
	// CRIOLeg runs the tests again on CRI-O, IPv6Leg on a single-stack
	// IPv6 cluster (Main).
	CRIOLeg, IPv6Leg bool
	// Legs run the tests again, each on a cluster of its own whose
	// Options are the suite's changed by the leg's (Main), after the
	// legs above.
	Legs []Leg

	skip string
}

// Leg is one more run of a suite's tests (Suite.Legs): Name says what it
// changes, Options changes the suite's options for it.
type Leg struct {
	Name    string
	Options func(*Options)
}

// Main is the suite's TestMain; it returns the exit code. Without its
// environment (not root, a variable unset) it runs the tests anyway, each
// skipping itself through Need, so that `go test ./...` says why instead
// of "ok" with nothing run. Otherwise it starts the cluster, runs Setup
// and the tests, then stops the cluster with every process, mount and
// namespace of the run. A failed start or Setup prints FAIL and returns 1.
// With CRIOLeg (and PODWIRE_CRIO_DIR set), IPv6Leg and Legs it then does it
// all again on a cluster of each such leg: the tests run once per leg, and
// Cluster.Runtime, Cluster.IPv6Only and Cluster.DualStack say which leg a
// test is in.
func (s *Suite) Main(m *testing.M) int {
	env, skip := TestEnv(s.Env...)
	if s.skip = skip; skip != "" {
		return m.Run()
	}
	code := s.leg(m, env, Runtime{}, false, nil)
	if s.CRIOLeg {
		if dir := os.Getenv(CRIOEnv); dir == "" {
			fmt.Printf("cluster: %s unset: no CRI-O leg (make test-k8s sets it)\n", CRIOEnv)
		} else {
			fmt.Printf("=== the suite again, its nodes on CRI-O (%s)\n", dir)
			code = max(code, s.leg(m, env, Runtime{CRIO: dir, Runc: RuntimeFromEnv().Runc}, false, nil))
		}
	}
	if s.IPv6Leg {
		fmt.Printf("=== the suite again, on a single-stack IPv6 cluster\n")
		code = max(code, s.leg(m, env, Runtime{}, true, nil))
	}
	for _, l := range s.Legs {
		fmt.Printf("=== the suite again, %s\n", l.Name)
		code = max(code, s.leg(m, env, Runtime{}, false, l.Options))
	}
	return code
}

// leg is one run of the tests on a cluster of its own whose nodes run rt
// (the zero value: Options' Runtime, else RuntimeFromEnv), single-stack
// IPv6 with ipv6Only, its Options changed by change when not nil.
func (s *Suite) leg(m *testing.M, env map[string]string, rt Runtime, ipv6Only bool, change func(*Options)) int {
	logf := func(format string, args ...any) { fmt.Printf("cluster: "+format+"\n", args...) }
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	defer cancel()
	opts := s.Options(env)
	opts.Logf, opts.Keep = logf, os.Getenv("PODWIRE_K8S_KEEP") != ""
	opts.IPv6Only = opts.IPv6Only || ipv6Only
	if change != nil {
		change(&opts)
	}
	if rt != (Runtime{}) {
		opts.Runtime = rt
	}
	if opts.Runtime == (Runtime{}) {
		opts.Runtime = RuntimeFromEnv()
	}
	if opts.Runtime.Dir == "" && !opts.Runtime.IsCRIO() {
		logf("PODWIRE_CONTAINERD_DIR unset: the nodes run the host's containerd (the legacy leg)")
	}
	start := time.Now()
	c, err := Start(ctx, opts)
	if err != nil {
		fmt.Printf("FAIL: cluster start (%s): %v\n", opts.Runtime.Name(), err)
		return 1
	}
	defer func() {
		t0 := time.Now()
		if err := c.Stop(); err != nil {
			fmt.Printf("FAIL: cluster stop: %v\n", err)
		}
		logf("stopped in %.1fs", time.Since(t0).Seconds())
	}()
	family := ""
	if opts.IPv6Only {
		family = ", single-stack IPv6"
	}
	logf("up in %.1fs (%s%s)", time.Since(start).Seconds(), opts.Runtime.Name(), family)
	stop, err := s.Setup(ctx, c, env)
	if err != nil {
		fmt.Printf("FAIL: %v\n", err)
		return 1
	}
	if stop != nil {
		defer stop()
	}
	logf("set up in %.1fs", time.Since(start).Seconds())
	return m.Run()
}

// Need skips t when Main started no cluster, saying why.
func (s *Suite) Need(t testing.TB) {
	t.Helper()
	if s.skip != "" {
		t.Skip(s.skip)
	}
}

// VersionLine is a line of the run's versions for name: the first line
// that argv prints, or the error running it.
func VersionLine(ctx context.Context, name string, argv ...string) string {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	v := strings.Join(strings.Fields(strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]), " ")
	if err != nil {
		v += fmt.Sprintf(" (error: %v)", err)
	}
	return fmt.Sprintf("%-24s %s", name, v)
}

// CNIVersionLine is VersionLine for a CNI plugin: what it answers to
// CNI_COMMAND=VERSION.
func CNIVersionLine(ctx context.Context, name, plugin string) string {
	cmd := exec.CommandContext(ctx, plugin)
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	out, err := cmd.CombinedOutput()
	v := strings.TrimSpace(string(out))
	if err != nil {
		v += fmt.Sprintf(" (error: %v)", err)
	}
	return fmt.Sprintf("%-24s %s", name, v)
}

// PushArchive pushes an archive of `make image` (recorded as imageRef,
// REGISTRY/podwire-agent:VERSION) to the run's registry under its version
// tag with `make push`'s command (tools/image push), run in the outside
// netns, and returns the reference it printed, pinned by digest. The
// registry must be running (StartRegistry).
func (c *Cluster) PushArchive(ctx context.Context, archive, imageRef string) (string, error) {
	i := strings.LastIndex(imageRef, ":")
	if i < 0 || strings.Contains(imageRef[i:], "/") {
		return "", fmt.Errorf("image reference %q has no tag", imageRef)
	}
	ref := RegistryHost + "/podwire/podwire-agent" + imageRef[i:]
	tool := []string{"go", "run", "github.com/podwire/podwire/tools/image"}
	if c.opts.ImageTool != "" {
		tool = []string{c.opts.ImageTool}
	}
	argv := append(append([]string{"--net=" + c.OutsideNetNS, "--"}, tool...), "push", archive, ref)
	out, err := exec.CommandContext(ctx, "nsenter", argv...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return "", fmt.Errorf("push of %s to %s: %v\n%s", archive, ref, err, stderr)
	}
	pinned := strings.TrimSpace(string(out))
	if !strings.HasPrefix(pinned, ref+"@sha256:") {
		return "", fmt.Errorf("the push printed %q, want %s@sha256:...", pinned, ref)
	}
	return pinned, nil
}

// HelmRelease is a chart's release as a suite installs it: helm's binary
// (scripts/helm-build.sh), the chart's directory, the release's name and
// the namespace helm records it in, and the DaemonSet whose rollout says
// it is in place, "NAMESPACE/NAME".
type HelmRelease struct {
	Helm, Chart, Name, Namespace, DaemonSet string
}

// HelmApply runs `helm VERB` (install or upgrade) of r with values (a
// values file in the run's directory: JSON, YAML's superset) and waits up
// to rollout for r's DaemonSet to roll out; it returns how long both took.
// A DaemonSet that does not roll out is an error with its pods'
// description and logs.
func (c *Cluster) HelmApply(ctx context.Context, r HelmRelease, verb string, values map[string]any, rollout time.Duration) (time.Duration, error) {
	b, err := json.Marshal(values)
	if err != nil {
		return 0, err
	}
	file := filepath.Join(c.Dir, r.Name+"-values-"+verb+".yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return 0, err
	}
	chart, err := filepath.Abs(r.Chart)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := c.Helm(ctx, r.Helm, verb, r.Name, chart, "--namespace", r.Namespace, "-f", file); err != nil {
		return 0, err
	}
	ns, ds, _ := strings.Cut(r.DaemonSet, "/")
	if out, err := c.RollOut(ctx, ns, "ds/"+ds, rollout); err != nil {
		return 0, fmt.Errorf("the DaemonSet %s did not roll out after helm %s: %v\n%s", r.DaemonSet, verb, err, out)
	}
	return time.Since(start), nil
}
