package cluster

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// RegistryHost is the address of the run's image registry (StartRegistry):
// the outside network's, on the nodes' segment.
var RegistryHost = netip.AddrPortFrom(OutsideIP, 5000).String()

// StartRegistry serves an in-memory OCI registry (go-containerregistry's
// pkg/registry, plain HTTP) on RegistryHost inside the outside netns until
// Stop, and tells every node's containerd to pull from it over plain HTTP,
// as an operator does for such a registry: a hosts.toml under the CRI
// registry's config_path (CRI-O's nodes have it in their registries.conf
// from the start). Push to it from the outside netns. A second call
// returns nil: Start starts it for CRI-O's nodes.
func (c *Cluster) StartRegistry() error {
	if c.registry != nil {
		return nil // Start's, for CRI-O nodes
	}
	var ln net.Listener
	if err := inNetNS(c.OutsideNetNS, func() error {
		var err error
		ln, err = net.Listen("tcp", RegistryHost)
		return err
	}); err != nil {
		return fmt.Errorf("failed to listen on %s in the outside netns: %w", RegistryHost, err)
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n",
		"http://"+RegistryHost, "http://"+RegistryHost)
	for _, n := range c.Nodes {
		dir := filepath.Join(n.Dir, "certs.d", RegistryHost)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			ln.Close()
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
			ln.Close()
			return err
		}
	}
	srv := &http.Server{
		Handler:           registry.New(registry.Logger(log.New(io.Discard, "", 0))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			c.logf("registry: %v", err)
		}
	}()
	c.registry = srv
	c.logf("registry on %s (outside netns)", RegistryHost)
	return nil
}

// stopRegistry closes the registry, if one runs.
func (c *Cluster) stopRegistry() error {
	if c.registry == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.registry.Shutdown(ctx)
}
