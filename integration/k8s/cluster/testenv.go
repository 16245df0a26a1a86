package cluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestEnv reads the variables keys of `make test-k8s`'s environment (see
// its Makefile line). skip says why a suite cannot start its cluster ("":
// it can): not root, or a variable unset. A suite's TestMain then runs its
// tests anyway, each reporting itself skipped with that reason, so that
// `go test ./...` says so instead of "ok" with nothing run.
func TestEnv(keys ...string) (env map[string]string, skip string) {
	env = map[string]string{}
	var missing []string
	for _, k := range keys {
		if env[k] = os.Getenv(k); env[k] == "" {
			missing = append(missing, k)
		}
	}
	switch {
	case os.Geteuid() != 0:
		skip = "needs root: run it with make test-k8s"
	case len(missing) > 0:
		skip = "needs " + strings.Join(missing, ", ") + " (make test-k8s's environment): run it with make test-k8s"
	}
	return env, skip
}

// MustKubectl is Kubectl bounded by 2 minutes, failing t on an error.
func (c *Cluster) MustKubectl(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	return c.MustKubectlAs(t, c.AdminKubeconfig, c.adminCache(), stdin, args...)
}

// MustKubectlAs is KubectlAs bounded by 2 minutes, failing t on an error.
func (c *Cluster) MustKubectlAs(t testing.TB, kubeconfig, cacheDir, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.KubectlAs(ctx, kubeconfig, cacheDir, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
