package nodetables

import (
	"encoding/json"
	"net/netip"
	"time"
)

// cacheName is the node annotation cache in stateDir.
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
	c := &nodeCache{}
	if found, err := readStateFile(stateDir, cacheName, "node annotation cache", c); !found {
		return nil, err
	}
	return c, nil
}

// writeCache writes c; the node agent is the only writer (WriteNodeEgress).
func writeCache(stateDir string, c *nodeCache) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return writeStateFile(stateDir, cacheName, "node annotation cache", b)
}
