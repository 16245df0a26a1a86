package nodetables

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWriteCacheLeavesNoTemporaryFile: a write leaves only the cache; a
// temporary file left by a killed writer is removed by the next write, which
// writes the cache.
func TestWriteCacheLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	if err := writeCache(dir, &nodeCache{Node: "n1", Fetched: time.Now()}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != cacheName {
		t.Fatalf("state dir after a write: %v, want only %s", entries, cacheName)
	}
	// What atomicfile.WriteFile leaves when killed before its rename.
	tmp := filepath.Join(dir, "."+cacheName+".4711.tmp")
	if err := os.WriteFile(tmp, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeCache(dir, &nodeCache{Node: "n2", Fetched: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("temporary file of a killed writer not removed: %v", err)
	}
	c, err := readCache(dir)
	if err != nil || c == nil || c.Node != "n2" {
		t.Fatalf("cache after recovery: %+v, %v", c, err)
	}
}
