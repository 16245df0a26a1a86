package nodetables

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/podwire/podwire/pkg/atomicfile"
)

// cacheName is the node annotation cache in stateDir. Not "*.json": the state
// store reads every *.json file there as an attachment record.
const cacheName = "node-egress-ip.cache"

// nodeCache is the last answer of the API for the node's egress annotation.
type nodeCache struct {
	Node    string    `json:"node"`
	Fetched time.Time `json:"fetched"`
	// Found is false when the node has no podwire.io/egress-ip annotation.
	Found bool   `json:"found"`
	Value string `json:"value,omitempty"`
	// V4 and V6 are the annotation parsed (the first of each family).
	V4       netip.Addr `json:"v4,omitzero"`
	V6       netip.Addr `json:"v6,omitzero"`
	Warnings []string   `json:"warnings,omitempty"`
}

// readCache returns the cached annotation, or nil when there is none.
func readCache(stateDir string) (*nodeCache, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, cacheName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read the node annotation cache: %w", err)
	}
	c := &nodeCache{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("corrupt node annotation cache %q: %w", filepath.Join(stateDir, cacheName), err)
	}
	return c, nil
}

// writeCache writes c with atomicfile.WriteFile, mode 0600. The node agent
// is the only writer (WriteNodeEgress), so the temporary files a killed
// writer left are its own and are removed first.
func writeCache(stateDir string, c *nodeCache) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("failed to create state dir %q: %w", stateDir, err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	path := filepath.Join(stateDir, cacheName)
	if err := atomicfile.RemoveTemps(path); err != nil {
		return fmt.Errorf("failed to write the node annotation cache: %w", err)
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("failed to write the node annotation cache: %w", err)
	}
	return nil
}
